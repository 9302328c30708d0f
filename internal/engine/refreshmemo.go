package engine

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// refreshMemoMaxAge is how long a remembered description of the agent's refresh answers a look at a group
// whose instances did not change since: the production safety poll (2 minutes), so that what moves a refresh
// without moving an instance (a cancel or rollback by someone else, a Failed refresh whose alarm the agent also
// polls itself) is seen within one safety poll.
const refreshMemoMaxAge = 2 * time.Minute

// RefreshMemo remembers, by group, the agent's active refresh as DescribeInstanceRefreshes last described it (or
// as StartInstanceRefresh just accepted it: Pending) and the group's instances (id and lifecycle state) at that
// moment. Auto Scaling moves a refresh by launching,
// holding, warming and terminating instances: a look whose group has the same instances in the same states,
// within refreshMemoMaxAge, takes the refresh from memory instead of describing it again (the waits on a new
// instance's warm-up, minutes each, make no call). Safe for concurrent use; a nil *RefreshMemo remembers
// nothing, so every look describes.
type RefreshMemo struct {
	mu   sync.Mutex
	seen map[string]refreshSeen
}

type refreshSeen struct {
	ir        providers.InstanceRefresh
	instances string
	at        time.Time
}

// NewRefreshMemo returns an empty memo.
func NewRefreshMemo() *RefreshMemo { return &RefreshMemo{seen: map[string]refreshSeen{}} }

func (m *RefreshMemo) recall(group, id, instances string, now time.Time) (providers.InstanceRefresh, bool) {
	if m == nil {
		return providers.InstanceRefresh{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.seen[group]
	if !ok || s.ir.ID != id || s.instances != instances || now.Before(s.at) || now.Sub(s.at) >= refreshMemoMaxAge {
		return providers.InstanceRefresh{}, false
	}
	return s.ir, true
}

func (m *RefreshMemo) remember(group string, ir providers.InstanceRefresh, instances string, now time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seen[group] = refreshSeen{ir: ir, instances: instances, at: now}
}

func (m *RefreshMemo) forget(group string) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, group)
}

// refreshInstances names the group's instances and their lifecycle states, in id order.
func refreshInstances(v model.GroupView) string {
	parts := make([]string, 0, len(v.Instances)+len(v.WarmPool))
	for _, i := range append(append([]model.InstanceView(nil), v.Instances...), v.WarmPool...) {
		parts = append(parts, i.ID+"="+i.LifecycleState)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// describeRefresh describes the agent's refresh p.ID of group (DescribeInstanceRefreshes, this refresh only),
// or takes it from the orchestrator's RefreshMemo when the refresh was active at its last description, the
// group's instances are as they were then, it is younger than refreshMemoMaxAge, and the agent is not
// cancelling, halting or rolling the refresh back (those look at every answer).
func (o *Orchestrator) describeRefresh(ctx context.Context, group string, p *state.RefreshProgress, v model.GroupView) ([]providers.InstanceRefresh, error) {
	instances, now := refreshInstances(v), o.Clock.Now()
	plain := memoized(p)
	if plain {
		if ir, ok := o.RefreshMemo.recall(group, p.ID, instances, now); ok {
			return []providers.InstanceRefresh{ir}, nil
		}
	}
	found, err := o.refreshes().Describe(ctx, group, p.ID)
	if err != nil || len(found) == 0 || !plain || !found[0].Active() {
		o.RefreshMemo.forget(group)
		return found, err
	}
	o.RefreshMemo.remember(group, found[0], instances, now)
	return found, nil
}

// memoized tells a refresh whose looks may take it from the memo: the agent is not cancelling, halting or
// rolling it back.
func memoized(p *state.RefreshProgress) bool {
	return !p.Rollback && p.Cancel == "" && p.Halt == ""
}

// rememberStarted remembers the refresh StartInstanceRefresh just accepted, once its id is recorded, as Pending
// (the status Auto Scaling gives a refresh it accepts) with the group's instances the start was decided on: the
// look after the start describes it only once those instances or their states change (Auto Scaling launches
// its first replacement) or the memo is refreshMemoMaxAge old, as for a refresh described Pending.
func (o *Orchestrator) rememberStarted(group string, p *state.RefreshProgress, v model.GroupView) {
	if p == nil || p.ID == "" || !memoized(p) {
		return
	}
	now := o.Clock.Now()
	o.RefreshMemo.remember(group, providers.InstanceRefresh{ID: p.ID, Status: providers.RefreshPending, StartTime: now,
		LaunchTemplateID: p.LaunchTemplateID, LaunchTemplateName: p.LaunchTemplateName, Version: p.TargetVersion()}, refreshInstances(v), now)
}
