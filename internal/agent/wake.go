package agent

import (
	"context"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// wakeSet collects the groups, ECS clusters and EC2 instances named by wake-up events (events.KindWakeUp)
// until the agent's loop looks at them. Safe for concurrent use; the zero value is ready.
type wakeSet struct {
	mu        sync.Mutex
	groups    map[string]bool
	clusters  map[string]bool
	instances map[string]bool
	ch        chan struct{}
}

// signal returns the channel that receives a value when a wake-up was added since the last take.
func (w *wakeSet) signal() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	return w.ch
}

// add records a wake-up and signals the loop (without blocking: one pending signal covers many wake-ups).
// instance is recorded only when the event names neither a group nor a cluster (EC2 Instance State-change
// Notification).
func (w *wakeSet) add(group, cluster, instance string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.groups == nil {
		w.groups, w.clusters, w.instances = map[string]bool{}, map[string]bool{}, map[string]bool{}
	}
	if group != "" {
		w.groups[group] = true
	}
	if cluster != "" {
		w.clusters[cluster] = true
	}
	if group == "" && cluster == "" && instance != "" {
		w.instances[instance] = true
	}
	if w.ch == nil {
		w.ch = make(chan struct{}, 1)
	}
	select {
	case w.ch <- struct{}{}:
	default:
	}
}

// take returns and clears the recorded groups, clusters and instances.
func (w *wakeSet) take() (groups, clusters, instances map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	groups, clusters, instances = w.groups, w.clusters, w.instances
	w.groups, w.clusters, w.instances = nil, nil, nil
	return groups, clusters, instances
}

// handleWakeUp records the target a wake-up event names — its Auto Scaling group, every ECS target of its
// cluster, or the group that listed its EC2 instance at the last look — for the loop to look at now instead of at the next poll, and deletes the message. It makes no AWS
// call and only reads the discovered targets (a.fleet): a wake-up never waits for a fleet pass, and a lifecycle action handled beside it
// never waits for the wake-up. The event is a claim: what it says (launched, DRAINING, ACTIVE) is not used;
// the look it causes re-reads AWS as the poll would (docs/events.md, "Wake-up events"). A lost or late event
// only delays a rollout until the next poll.
//
// A container instance that is DRAINING with tasks still running or pending (the event's runningTasksCount +
// pendingTasksCount, events.WakeUp.TasksLeft) ends no wait — a drain the rollout waits on is over only when its
// last task stopped, which sends an event of its own — so it is Ignored and makes no look: the tasks of a drain
// otherwise cost a look each (docs/performance.md). Skipping a look can only delay: the event that ends the
// wait, or the poll, looks again.
func (a *Agent) handleWakeUp(ev events.Event) (events.Disposition, error) {
	w := ev.Wake
	if w == nil || (w.Group == "" && w.Cluster == "" && w.InstanceID == "") {
		return events.Ignored, nil
	}
	if w.Status == "DRAINING" && w.TasksLeft != nil && *w.TasksLeft > 0 {
		return events.Ignored, nil
	}
	// A wake-up naming none of the targets the last look discovered (another tool's group or cluster, an
	// instance no managed group listed: the stack's rules are account-wide) is Ignored, so the ignored-messages
	// metric shows a rule routing more than the agent needs. Before the first look every wake-up counts.
	d := a.fleet.discovery()
	only := wokenTargets(d, set(w.Group), set(w.Cluster), set(w.InstanceID))
	if len(d.Targets) > 0 && len(only) == 0 {
		return events.Ignored, nil
	}
	a.wakes.add(w.Group, w.Cluster, w.InstanceID)
	return events.Done, nil
}

// handleOperator records the target an operator wake-up names (events.KindOperatorWakeUp: sent by approve,
// rollback, pause and resume after their DynamoDB write) for the loop to look at now, and deletes the message.
// The global scope names every discovered target; a managed node group's key (model.NodegroupKey) is
// taken as it is when the agent rolls node groups. Like every wake-up it is a claim: its action and sender are
// logged and never used — the look re-reads the rollout record (approval, rollback: Reread drops the record
// the agent kept, whose copy predates the operator's write), the pause locks and AWS
// as the poll would, so a forged one makes one extra look and nothing else. A target the agent does not
// manage is Ignored (after the first look; before it every wake-up counts, as for handleWakeUp).
func (a *Agent) handleOperator(ev events.Event) (events.Disposition, error) {
	o := ev.Operator
	if o == nil {
		return events.Ignored, nil
	}
	a.log.Info("operator wake-up: looking at its target now", zap.String(logging.Group, o.Group), zap.String(logging.Reason, "operator "+o.Action),
		zap.String(logging.Actor, o.Who), zap.String(logging.MessageID, ev.ID))
	d := a.fleet.discovery()
	switch {
	case o.Global():
		for name := range d.Targets {
			a.Reread(name)
			a.wakes.add(name, "", "")
		}
		if len(d.Targets) == 0 {
			return events.Ignored, nil
		}
		return events.Done, nil
	case strings.HasPrefix(o.Group, nodegroupKeyPrefix):
		if a.clients.EKSNodegroups == nil {
			return events.Ignored, nil
		}
	case len(d.Targets) > 0 && len(wokenTargets(d, set(o.Group), nil, nil)) == 0:
		return events.Ignored, nil
	}
	a.Reread(o.Group)
	a.wakes.add(o.Group, "", "")
	return events.Done, nil
}

// nodegroupKeyPrefix begins the key of a managed node group's rollout record (model.NodegroupKey).
const nodegroupKeyPrefix = "nodegroup/"

// set is the one-element set of s; empty for "".
func set(s string) map[string]bool {
	if s == "" {
		return nil
	}
	return map[string]bool{s: true}
}

// ReconcileWoken looks at the targets that wake-up events named since the last look: the groups named, the
// ECS targets of the clusters named, and the groups whose instances were named, among the discovered targets; targets the agent does not manage are
// left out. The look is the reconcile of a tick restricted to those targets. Run calls it when a wake-up
// arrives; errors are logged (the poll looks again).
func (a *Agent) ReconcileWoken(ctx context.Context) {
	groups, clusters, instances := a.wakes.take()
	if len(groups) == 0 && len(clusters) == 0 && len(instances) == 0 {
		return
	}
	a.pass.Lock()
	defer a.pass.Unlock()
	only := wokenTargets(a.fleet.discovery(), groups, clusters, instances)
	if a.clients.EKSNodegroups != nil {
		for g := range groups { // managed node groups named by operator wake-ups (handleOperator)
			if strings.HasPrefix(g, nodegroupKeyPrefix) {
				only[g] = true
			}
		}
	}
	if len(only) == 0 {
		return
	}
	if err := a.reconcilePass(ctx, only); err != nil {
		a.log.Warn("looking at woken targets failed; the next poll looks again", zap.Error(err))
	}
}

// wokenTargets returns the discovered targets named by groups, or, for ECS targets, by their cluster, or
// whose group listed one of instances when it was discovered.
func wokenTargets(d providers.Discovered, groups, clusters, instances map[string]bool) map[string]bool {
	only := map[string]bool{}
	for name, t := range d.Targets {
		if groups[name] || (t.Platform == model.PlatformECS && clusters[t.Cluster]) {
			only[name] = true
			continue
		}
		if len(instances) == 0 {
			continue
		}
		for _, i := range d.Groups[name].Instances {
			if instances[aws.ToString(i.InstanceId)] {
				only[name] = true
				break
			}
		}
	}
	return only
}
