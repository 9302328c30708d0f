package sim

import (
	"sort"
	"time"
)

// OnChange subscribes fn to every change of the account: it is called after each simulated API call or setup
// helper that changed something, and after each timed event (an instance finishing boot, an ECS agent
// connecting, a task reaching its next lastStatus, a lifecycle action timing out, an instance finishing its
// termination), each time once Auto Scaling, ECS managed draining and the ECS service scheduler have reacted to
// the change (the account is settled). Two drains undone within one agent iteration are two changes, each seen.
//
// fn runs with the account locked, on the goroutine that made the change: it must only read through the View
// it is given (valid only during the call) and never call the Account, its clients or anything that does
// (that would deadlock). Invariant checkers (internal/testworld/checker) use it to judge every state the simulated
// world passes through, not only the states between two agent iterations.
func (w *world) OnChange(fn func(*View)) {
	defer w.hold()()
	w.watchers = append(w.watchers, fn)
}

// Observe runs fn on a View of the account now (after running the behaviour that fell due), with the account
// locked: the same reads OnChange watchers make, for a look between changes. fn must not call the Account.
func (a *Account) Observe(fn func(*View)) {
	defer a.lock()()
	fn(&View{w: a.world})
}

// notifyWatchers calls the OnChange watchers. Callers hold the lock. A change made while watchers run (none
// should be) does not call them again.
func (w *world) notifyWatchers() {
	if len(w.watchers) == 0 || w.notifying {
		return
	}
	w.notifying = true
	defer func() { w.notifying = false }()
	v := &View{w: w}
	for _, fn := range w.watchers {
		fn(v)
	}
}

// View reads the account's state without locking it; it is handed to OnChange watchers and Observe callbacks,
// which run with the account locked, and is valid only during that call. Reads are not counted as API calls.
type View struct{ w *world }

// Now is the simulated time.
func (v *View) Now() time.Time { return v.w.now() }

// Groups returns every Auto Scaling group, sorted by name (as Account.Group returns each).
func (v *View) Groups() []GroupView {
	out := make([]GroupView, 0, len(v.w.autoScaling.groups))
	for _, n := range v.w.autoScaling.groupNames() {
		out = append(out, v.w.autoScaling.groupView(n))
	}
	return out
}

// Group returns the named group (zero GroupView when it does not exist), as Account.Group.
func (v *View) Group(name string) GroupView { return v.w.autoScaling.groupView(name) }

// Terminations returns every termination so far, in order, as Account.Terminations. The slice is the
// account's own: read it during the call, never keep or change it.
func (v *View) Terminations() []Termination { return v.w.autoScaling.terminations }

// LifecycleCompletions returns every CompleteLifecycleAction call so far (and the completions of simulated ECS
// managed draining), as Account.LifecycleCompletions. The slice is the account's own: read it during the call,
// never keep or change it.
func (v *View) LifecycleCompletions() []Completion { return v.w.autoScaling.completions }

// ImageUnhealthy reports whether instances launched from the image never become healthy
// (MarkImageUnhealthy), as Account.ImageUnhealthy.
func (v *View) ImageUnhealthy(imageID string) bool { return v.w.ec2.imageUnhealthy(imageID) }

// ServiceTasks returns how many of the service's tasks are RUNNING, as Account.ServiceTasks.
func (v *View) ServiceTasks(cluster, service string) int {
	return v.w.ecs.serviceTasks(cluster, service)
}

// DesiredChanges returns every change of the group's desired capacity, with who made it, as
// Account.DesiredChanges. The slice is the account's own: read it during the call, never keep or change it.
func (v *View) DesiredChanges(group string) []DesiredChange {
	if g := v.w.autoScaling.group(group); g != nil {
		return g.desiredChanges
	}
	return nil
}

// CapacityWrites returns every call that could change a group's desired capacity, whoever made it, as
// Account.CapacityWrites. The slice is the account's own: read it during the call, never keep or change it.
func (v *View) CapacityWrites() []CapacityWrite { return v.w.autoScaling.capacityWrites }

// LifecycleAction is one lifecycle action Auto Scaling created: one lifecycle hook's action for one instance
// entering Pending:Wait or Terminating:Wait.
type LifecycleAction struct {
	Token, InstanceID, Group, Hook string
	// Transition is TransitionLaunching or TransitionTerminating.
	Transition string
	// Target is the queue URL Auto Scaling sent the action's notification to ("" = the hook has no
	// notification target, such as ECS's own managed draining hook).
	Target  string
	Started time.Time
	// Active is true while the action waits for CompleteLifecycleAction (or its timeout).
	Active bool
	// Result is how the action ended: CONTINUE or ABANDON, "" while active or when it was cancelled because its
	// instance was terminated while it waited.
	Result string
	// TimedOut is true when the action ended at its heartbeat timeout (or global timeout) with the hook's
	// DefaultResult, not by CompleteLifecycleAction.
	// Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling lifecycle hooks": when the heartbeat timeout
	// elapses, Auto Scaling performs the hook's default action.
	TimedOut bool
	// GlobalDeadline is when the action's global timeout ends it whatever the heartbeats: Started + min(100 x
	// HeartbeatTimeout, 48 h) (Amazon EC2 Auto Scaling API Reference, "LifecycleHook": GlobalTimeout).
	GlobalDeadline time.Time
}

// LifecycleActions returns every lifecycle action Auto Scaling created so far, in the order they started.
func (v *View) LifecycleActions() []LifecycleAction {
	out := make([]LifecycleAction, 0, len(v.w.autoScaling.actions))
	for _, act := range v.w.autoScaling.actions {
		out = append(out, LifecycleAction{Token: act.token, InstanceID: act.instanceID, Group: act.group, Hook: act.hook,
			Transition: act.transition, Target: act.target, Started: act.started, Active: act.active, Result: act.result,
			TimedOut: act.timedOut, GlobalDeadline: act.globalDeadline})
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].Started.Equal(out[j].Started) {
			return out[i].Started.Before(out[j].Started)
		}
		return out[i].Token < out[j].Token
	})
	return out
}
