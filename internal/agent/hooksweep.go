package agent

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"k8s.io/utils/clock"

	"github.com/patch-agent/patch-agent/internal/lifecycleaction"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// maxSweepInterval is the longest time between two lifecycle sweeps of an event-driven agent, whatever the
// cached HeartbeatTimeouts say, and the interval for groups the hook check has not read yet since the agent
// started. A stack update may lower a HeartbeatTimeout after it was read: the first sighting of an action
// without its message reads the hooks again (at most 10 s old) and shortens the sweep's interval at once
// (hookSweep.shorten); until that sighting the sweep runs on the old value, so a timeout lowered below about a
// minute can still run out on a lost message in the hook check's interval after the update.
const maxSweepInterval = 20 * time.Second

// hookSweep keeps what the lifecycle sweep needs: per group with hooks of the agent's, the shortest
// HeartbeatTimeout among them (as the hook check last read it), and when the lifecycle actions were last
// looked for (a sweep, or a full pass's AdoptWaiting). Safe for concurrent use; the zero value is ready.
type hookSweep struct {
	mu    sync.Mutex
	beats map[string]time.Duration
	last  time.Time
	// shared is the DescribeAutoScalingGroups answer of the last pass's discovery and when it was read: a
	// sweep within maxShareAge of it uses it instead of describing the groups again (offer, fresh)
	shared   providers.Discovered
	sharedAt time.Time
}

// maxShareAge is how old a pass's discovery may be for the lifecycle sweep to use it as its own
// DescribeAutoScalingGroups answer: the same pass, give or take its calls.
const maxShareAge = 2 * time.Second

// offer records the discovery d a pass read at at, for a sweep that comes right after it.
func (s *hookSweep) offer(d providers.Discovered, at time.Time) {
	s.mu.Lock()
	s.shared, s.sharedAt = d, at
	s.mu.Unlock()
}

// fresh returns the last pass's discovery when it was read within maxShareAge before now.
func (s *hookSweep) fresh(now time.Time) (providers.Discovered, time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sharedAt.IsZero() || now.Sub(s.sharedAt) > maxShareAge || now.Before(s.sharedAt) {
		return providers.Discovered{}, time.Time{}, false
	}
	return s.shared, s.sharedAt, true
}

// note records group's shortest HeartbeatTimeout of the agent's hooks (lifecycleaction.HookCheck.Heartbeat); zero
// forgets the group (it has none).
func (s *hookSweep) note(group string, heartbeat time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if heartbeat <= 0 {
		delete(s.beats, group)
		return
	}
	if s.beats == nil {
		s.beats = map[string]time.Duration{}
	}
	s.beats[group] = heartbeat
}

// shorten lowers group's noted HeartbeatTimeout to heartbeat when the interval it gives is shorter than the
// one the sweep ran on (a hook of an action first seen without its message: lifecycleaction.Hooks.HeartbeatTimeoutRead),
// and reports whether it did; the next hook check notes the shortest again. A group not noted yet is noted,
// and reported as shortened when its interval is below maxSweepInterval (the sweep ran on that).
func (s *hookSweep) shorten(group string, heartbeat time.Duration) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if heartbeat <= 0 {
		return false
	}
	if s.beats == nil {
		s.beats = map[string]time.Duration{}
	}
	ran := maxSweepInterval
	if old, ok := s.beats[group]; ok {
		ran = min(ran, sweepInterval(old))
	}
	if old, ok := s.beats[group]; !ok || heartbeat < old {
		s.beats[group] = heartbeat
	}
	return sweepInterval(heartbeat) < ran
}

// keep forgets the groups that are no longer discovered, so that a gone group's short HeartbeatTimeout no
// longer sets how often the sweep looks.
func (s *hookSweep) keep(d providers.Discovered) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for g := range s.beats {
		if _, ok := d.Targets[g]; !ok {
			delete(s.beats, g)
		}
	}
}

// hooksUnchecked returns the discovered groups whose hooks the hook check has not read since the agent
// started (hookcheck.go reads a bounded number a pass): the sweep looks at them too, at maxSweepInterval, as if
// they had a hook of the agent's, since nothing tells yet that they have none. Right after a restart — an agent
// that died after receiving a lifecycle action is field case C4 — every group is such a group. Sorted.
func (a *Agent) hooksUnchecked(d providers.Discovered) []string {
	return a.hookChecks.unchecked(d.Names())
}

// looked records that the lifecycle actions of every group with hooks were looked for at at.
func (s *hookSweep) looked(at time.Time) {
	s.mu.Lock()
	s.last = at
	s.mu.Unlock()
}

// plan returns the groups to sweep (sorted), how often (sweepInterval of the shortest HeartbeatTimeout of the
// agent's hooks, at most maxSweepInterval) and when the last look was; no groups when none has a hook of the
// agent's.
func (s *hookSweep) plan() (groups []string, every time.Duration, last time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	every = maxSweepInterval
	for g, beat := range s.beats {
		groups = append(groups, g)
		every = min(every, sweepInterval(beat))
	}
	sort.Strings(groups)
	return groups, every, s.last
}

// sweepInterval is how often the lifecycle sweep must look at the groups whose shortest HeartbeatTimeout of
// the agent's hooks is heartbeat, so that an action whose message is lost is taken up, and heartbeated, with a
// third of its timeout to spare. Looks come at most an interval apart (an early sweep only shortens one), so
// the action is first seen within an interval of its start and taken up at the first look at least
// lifecycleaction.AdoptAfter after that, within one more interval: 2*every + AdoptAfter <= 2/3 of the timeout. Once
// taken up, each heartbeat is due a third of the timeout after the last and sent within an interval of that.
// 30 s: every 5 s; 60 s: 10 s; from 120 s on the 20 s of maxSweepInterval is shorter. At least a second.
// A sweep every 20 s or a third of the timeout would not do: at 60 s its worst case (an early sweep just
// before the action had waited AdoptAfter) takes the action up as its timeout runs out.
func sweepInterval(heartbeat time.Duration) time.Duration {
	return max((2*heartbeat/3-lifecycleaction.AdoptAfter(heartbeat))/2, time.Second)
}

// sweepAt returns when the next lifecycle sweep is due; false when the agent needs none: no group has a hook
// of the agent's, or the full passes (ReconcileInterval, which adopt and drive the lifecycle actions too)
// come at least as often as the sweep would.
func (a *Agent) sweepAt() (time.Time, bool) {
	groups, every, last := a.sweep.plan()
	unchecked := len(a.hooksUnchecked(a.fleet.discovery()))
	if len(groups)+unchecked == 0 || a.settings.ReconcileInterval <= every {
		return time.Time{}, false
	}
	return last.Add(every), true
}

// SweepLifecycle looks for lifecycle actions between the full passes of an event-driven agent (wake-up
// events on: the safety poll is minutes apart, longer than a short HeartbeatTimeout). One
// DescribeAutoScalingGroups per hundred groups with hooks of the agent's (providers.DescribeGroups; its calls
// grow with the groups and with time, never with the instances) feeds lifecycleaction.Hooks.AdoptWaiting, which, as
// on a full pass, takes up actions whose message has not come (a lost receive, an agent that died after
// receiving: the message invisible for its visibility timeout) and drives the actions it took up — drain
// check, heartbeat, completion — and reads a warm pool when its rule says so (field case C18). It runs every
// maxSweepInterval (20 s), or sweepInterval of the shortest HeartbeatTimeout of those hooks when that is
// shorter, so an action is taken up and heartbeated with a third of its timeout to spare whatever became of its
// message (field case C4). A record its message drives whose owner died after writing it is judged by the take-over rule
// (docs/state.md, "Lifecycle action records left by their owner"; lifecycleaction.Hooks.staleRule): heartbeated
// once its heartbeat is overdue while the dead owner's claim holds, taken over (confirmed, one conditional
// write) once the claim has expired, never while a live owner drives it. Groups whose hooks the hook check
// has not read yet since the agent started are swept too (hooksUnchecked), so that a restart does not
// leave the groups the bounded hook check reaches last without a sweep for several polls. Run and Step call it
// when sweepAt is due; errors are logged (the next sweep, or pass, looks again).
//
// The groups that a look's discovery described within maxShareAge (2 s: the same turn of the loop) are
// taken from that answer instead of being described again; the sweep then counts from
// when that answer was read, so every group is still seen at least every sweep interval.
func (a *Agent) SweepLifecycle(ctx context.Context) {
	a.pass.Lock()
	defer a.pass.Unlock()
	known := a.fleet.discovery()
	names := a.hooksUnchecked(known)
	a.sweep.keep(known)
	groups, _, _ := a.sweep.plan()
	for _, g := range groups {
		if _, ok := known.Targets[g]; ok && !slices.Contains(names, g) {
			names = append(names, g)
		}
	}
	sort.Strings(names)
	now := a.clock.Now()
	shared, sharedAt, fresh := a.sweep.fresh(now)
	described := maps.Clone(shared.Groups) // the look's answer, for the groups it has
	var rest []string
	for _, name := range names {
		if _, ok := shared.Groups[name]; !fresh || !ok {
			rest = append(rest, name)
		}
	}
	if len(rest) < len(names) {
		now = sharedAt // seen when the look read them
	}
	a.sweep.looked(now)
	if len(names) == 0 {
		return
	}
	if len(rest) > 0 {
		more, err := providers.DescribeGroups(ctx, a.clients.AutoScaling, rest)
		if err != nil {
			a.log.Warn("lifecycle sweep: describing the groups failed; the next sweep looks again",
				zap.Int(logging.GroupCount, len(rest)), zap.String(logging.Group, firstNames(rest, sweepLogNames)), zap.Error(err))
			return
		}
		if described == nil || !fresh {
			described = more
		} else {
			maps.Copy(described, more)
		}
	}
	wanted := make(map[string]bool, len(names))
	for _, name := range names {
		wanted[name] = true
	}
	for name := range described {
		if !wanted[name] {
			delete(described, name)
		}
	}
	d := providers.Discovered{Targets: map[string]model.Target{}, Groups: described}
	for name := range described {
		d.Targets[name] = known.Targets[name]
	}
	a.hooks.AdoptWaiting(ctx, d)
}

// sweepIfDue runs the lifecycle sweep when it is due, or early — in the second half of its interval — when a
// look of this turn has just described the groups (hookSweep.fresh): that sweep makes no
// DescribeAutoScalingGroups of its own, and one run early only shortens the time between two.
func (a *Agent) sweepIfDue(ctx context.Context) {
	at, ok := a.sweepAt()
	if !ok {
		return
	}
	now := a.clock.Now()
	_, every, _ := a.sweep.plan()
	_, _, fresh := a.sweep.fresh(now)
	if !now.Before(at) || (fresh && !now.Before(at.Add(-every/2))) {
		a.SweepLifecycle(ctx)
	}
}

// sweepTimer returns a timer that fires when the next lifecycle sweep is due (never, when none is needed).
func (a *Agent) sweepTimer() clock.Timer {
	at, ok := a.sweepAt()
	if !ok {
		t := a.clock.NewTimer(time.Hour)
		t.Stop() // no sweep: a stopped timer never fires
		return t
	}
	return a.clock.NewTimer(max(at.Sub(a.clock.Now()), 0))
}

// sweepLogNames is how many group names a failed sweep's log line names; its count field gives them all, so
// that a fleet of 1,000 groups is not one huge line.
const sweepLogNames = 5

// firstNames joins the first n of names with commas, and says how many more there are ("a,b,c and 997 more").
func firstNames(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ","), len(names)-n)
}
