package agent_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/lifecycleaction"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// A full pass over a group whose instance refresh is under way, while no lifecycle action of it waits (a new
// instance warming up), reads the group and its refresh and nothing of the cluster: no ListContainerInstances,
// no DescribeContainerInstances. Ten such passes with the group's instances unchanged describe the refresh
// once.
func TestRefreshUnderWayIsLookedAtWithoutTheClusterAndDescribedOnceWhileNothingMoves(t *testing.T) {
	g := refreshGroup(1)
	w := buildRefresh(t, oneGroup(&g))
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	quiet := func() bool {
		r := w.Rollout(ctx, g.Name)
		if !midRefresh(r) {
			return false
		}
		for _, i := range w.Account.Group(g.Name).Instances {
			if i.LifecycleState != "InService" {
				return false
			}
		}
		return true
	}
	ok, err := w.RunUntil(ctx, time.Second, 2*time.Hour, quiet)
	require.NoError(t, err)
	require.True(t, ok, "%+v", w.Rollout(ctx, g.Name))
	require.NoError(t, w.Agent.Reconcile(ctx)) // the look that saw the group settle describes the refresh
	w.Account.ResetCalls()
	for range 10 {
		w.Account.Advance(5 * time.Second)
		require.True(t, quiet(), "the refresh moved while the test looked")
		require.NoError(t, w.Agent.Reconcile(ctx))
	}
	calls := w.Account.Calls()
	require.Equal(t, 10, calls["autoscaling:DescribeAutoScalingGroups"], "each pass read the group")
	require.Zero(t, calls["ecs:ListContainerInstances"])
	require.Zero(t, calls["ecs:DescribeContainerInstances"])
	require.Zero(t, calls["autoscaling:DescribeInstanceRefreshes"], "the same instances in the same states within 2 minutes")
	require.Equal(t, state.PhaseReplacing, w.Rollout(ctx, g.Name).Phase)
	require.Empty(t, w.Checker.Finish())
}

// Once the agent's drain of an old instance under its terminating action is under way (DRAINING, a task still
// RUNNING), each look at the action checks the drain once: one DescribeContainerInstances, no second status and
// no UpdateContainerInstancesState. The look that set it DRAINING left the listing of its tasks to the next
// look; that one lists them once, and from then on — ECS still counting more tasks running or pending than
// the daemon tasks that listing found — no look lists them again.
func TestTerminatingActionWhoseDrainIsUnderWayIsCheckedOncePerLook(t *testing.T) {
	g := refreshGroup(1)
	spec := oneGroup(&g)
	spec.Sim.TaskStartDelay = 3 * lifecycleaction.LookEvery // the drain's replacement tasks start late: its tasks run on
	w := buildRefresh(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	act := runToAction(t, w, g.Name, sim.TransitionTerminating, "no drain under way", drainingWithTasks)
	look := func() map[string]int {
		w.Account.Advance(lifecycleaction.LookEvery) // the agent checked the drain just now: the next check waits that long
		require.True(t, drainingWithTasks(w.Account.Group(g.Name).Instances[indexOfInstance(w.Account.Group(g.Name), act.InstanceID)]))
		w.Account.ResetCalls()
		disp, err := w.Agent.Handle(ctx, events.Event{Kind: events.KindLifecycleAction, Lifecycle: &events.LifecycleAction{GroupName: act.Group,
			HookName: act.Hook, InstanceID: act.InstanceID, Token: act.Token, Transition: events.TransitionTerminating}})
		require.NoError(t, err)
		require.Equal(t, events.Hold, disp, "the drain goes on")
		return w.Account.Calls()
	}
	calls := look()
	require.Equal(t, 1, calls["ecs:DescribeContainerInstances"], "%v", calls)
	require.Equal(t, 2, calls["ecs:ListTasks"], "the first listing of the tasks, desired status RUNNING and STOPPED: %v", calls)
	require.Zero(t, calls["ecs:UpdateContainerInstancesState"], "%v", calls)
	calls = look()
	require.Equal(t, 1, calls["ecs:DescribeContainerInstances"], "%v", calls)
	require.Zero(t, calls["ecs:ListTasks"], "%v", calls)
	require.Zero(t, calls["ecs:DescribeTasks"], "%v", calls)
	require.Zero(t, calls["ecs:UpdateContainerInstancesState"], "%v", calls)
	r := runTo(t, w, 3*time.Hour, "completed", ended(testworld.ImageB), g.Name)
	require.Equal(t, state.PhaseCompleted, r.Phase, r.Reason)
	require.Empty(t, w.Checker.Finish())
}

// hookReads is a store that counts the reads of lifecycle action records (GetHook).
type hookReads struct {
	state.Store
	reads atomic.Int64
}

func (s *hookReads) GetHook(ctx context.Context, key string) (state.Hook, error) {
	s.reads.Add(1)
	return s.Store.GetHook(ctx, key)
}

// While this replica holds a lifecycle action's claim with more than the lease margin left, its looks at the
// action read no record: the record it last read or wrote is the stored one (no other replica writes it while
// the claim holds). Once the claim is within the margin of its expiry the next look reads the store, and a
// record another replica took over meanwhile is respected: nothing is drained or completed by this one.
func TestALifecycleActionIsLookedAtWithoutReadingItsRecordWhileItsClaimHolds(t *testing.T) {
	g := refreshGroup(1)
	spec := oneGroup(&g)
	store := &hookReads{Store: state.NewMemory()}
	spec.Store = store
	w := buildRefresh(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	act := runToAction(t, w, g.Name, sim.TransitionTerminating, "no drain under way", drainingWithTasks)
	ev := events.Event{Kind: events.KindLifecycleAction, Lifecycle: &events.LifecycleAction{GroupName: act.Group,
		HookName: act.Hook, InstanceID: act.InstanceID, Token: act.Token, Transition: events.TransitionTerminating}}
	look := func() events.Disposition {
		disp, err := w.Agent.Handle(ctx, ev)
		require.NoError(t, err)
		return disp
	}
	store.reads.Store(0)
	for range 3 {
		require.Equal(t, events.Hold, look(), "the drain goes on")
		w.Account.Advance(time.Second)
	}
	require.Zero(t, store.reads.Load(), "the claim holds: the record this process wrote is the stored one")

	// Another replica takes the action over once this one's claim has run out (expiry plus the margin).
	key := model.ActionKey(act.Group, act.InstanceID, act.Hook)
	rec, err := store.Store.GetHook(ctx, key)
	require.NoError(t, err)
	require.Equal(t, w.Agent.Store(), state.Store(store))
	rule := state.LeaseRule{}
	w.Account.Advance(rec.OwnerExpires.Sub(w.Account.Clock().Now()) + rule.Margin() + time.Second)
	rec = rec.WithLease(rule.Claim("other-replica", w.Account.Clock().Now()))
	_, err = store.Store.PutHook(ctx, rec)
	require.NoError(t, err)
	w.Account.ResetCalls()
	require.Equal(t, events.Hold, look(), "another replica works on it")
	require.Equal(t, int64(1), store.reads.Load(), "a claim past its margin is not trusted: the record is read")
	calls := w.Account.Calls()
	require.Zero(t, calls["autoscaling:CompleteLifecycleAction"], "%v", calls)
	require.Zero(t, calls["autoscaling:RecordLifecycleActionHeartbeat"], "%v", calls)
	require.Zero(t, calls["ecs:DescribeContainerInstances"], "%v", calls)
}

// markLists is a store that counts the listings of drain marks (ListDrainMarks).
type markLists struct {
	state.Store
	lists atomic.Int64
}

func (s *markLists) ListDrainMarks(ctx context.Context) ([]state.DrainMark, error) {
	s.lists.Add(1)
	return s.Store.ListDrainMarks(ctx)
}

// The recovery of drained instances (lifecycleaction.Hooks.Recover) lists the drain marks again only when this
// process wrote or deleted one since its last listing, or that listing is a lease TTL (2 minutes) old: full
// passes 15 s apart with no drain list once. A mark written beside the agent (another replica's) over an
// instance that is InService again is seen within the lease TTL and the instance put back ACTIVE; the agent's
// deletion of that mark makes the next pass list again.
func TestDrainMarksAreListedAgainOnlyAfterTheAgentsOwnMarkWritesOrALeaseTTL(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	store := &markLists{Store: state.NewMemory()}
	spec.Store = store
	w := build(t, spec)
	ctx := context.Background()
	settle(t, w, 10*time.Second)
	w.Account.Advance(2*time.Minute + time.Second)
	store.lists.Store(0)
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Equal(t, int64(1), store.lists.Load(), "the last listing is a lease TTL old")
	for range 7 {
		w.Account.Advance(15 * time.Second)
		require.NoError(t, w.Agent.Reconcile(ctx))
	}
	require.Equal(t, int64(1), store.lists.Load(), "no mark written since the listing 105 s before")

	id := w.Account.Group(g.Name).Instances[0].ID
	inst, _ := w.Account.Instance(id)
	_, err := w.Account.ECS().UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: aws.String("c1"),
		ContainerInstances: []string{inst.ContainerInstanceARN}, Status: ecstypes.ContainerInstanceStatusDraining})
	require.NoError(t, err)
	require.NoError(t, store.PutDrainMark(ctx, state.DrainMark{InstanceID: id, Group: g.Name, Platform: model.PlatformECS,
		Cluster: "c1", Token: "timed-out-token", At: w.Account.Clock().Now()}))
	w.Account.Advance(15 * time.Second) // 120 s after the last listing
	require.NoError(t, w.Agent.Reconcile(ctx))
	inst, _ = w.Account.Instance(id)
	require.Equal(t, "ACTIVE", inst.ContainerInstanceStatus, "seen within the lease TTL and put back in service")
	require.Equal(t, int64(2), store.lists.Load())
	w.Account.Advance(15 * time.Second)
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Equal(t, int64(3), store.lists.Load(), "the agent deleted the mark: listed again")
	w.Account.Advance(15 * time.Second)
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Equal(t, int64(3), store.lists.Load())
	marks, err := store.Store.ListDrainMarks(ctx)
	require.NoError(t, err)
	require.Empty(t, marks)
}

// listings is a store that lists rollout records and pause locks in one read (state.RolloutsAndLocksLister,
// as the DynamoDB store does) and counts the listings by kind.
type listings struct {
	*state.Memory
	both, rollouts, locks atomic.Int64
}

func (s *listings) ListRolloutsAndLocks(ctx context.Context) ([]state.Rollout, []state.Lock, error) {
	s.both.Add(1)
	return s.Memory.ListRolloutsAndLocks(ctx)
}

func (s *listings) ListRollouts(ctx context.Context) ([]state.Rollout, error) {
	s.rollouts.Add(1)
	return s.Memory.ListRollouts(ctx)
}

func (s *listings) ListLocks(ctx context.Context) ([]state.Lock, error) {
	s.locks.Add(1)
	return s.Memory.ListLocks(ctx)
}

// A full pass over a group whose instance refresh is under way reads the rollout records and the pause locks
// in one listing (the refresh's look checks the pause on every pass: a pause cancels the refresh), and a pause
// put before a pass cancels the refresh in that pass.
func TestAFullPassReadsTheRolloutsAndThePauseLocksInOneListing(t *testing.T) {
	g := refreshGroup(1)
	spec := oneGroup(&g)
	store := &listings{Memory: state.NewMemory()}
	spec.Store = store
	w := buildRefresh(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	ok, err := w.RunUntil(ctx, time.Second, 2*time.Hour, func() bool { return midRefresh(w.Rollout(ctx, g.Name)) })
	require.NoError(t, err)
	require.True(t, ok, "%+v", w.Rollout(ctx, g.Name))
	store.both.Store(0)
	store.rollouts.Store(0)
	store.locks.Store(0)
	for range 10 {
		w.Account.Advance(15 * time.Second)
		require.NoError(t, w.Agent.Reconcile(ctx))
		require.True(t, refreshUnderWay(w.Rollout(ctx, g.Name)))
	}
	require.Equal(t, int64(10), store.both.Load(), "one listing a pass")
	require.Zero(t, store.rollouts.Load())
	require.Zero(t, store.locks.Load(), "the pause checks use the pass's listing")

	require.NoError(t, store.PutLock(ctx, state.Lock{Group: g.Name, Reason: "change freeze", Who: "alice", Since: w.Account.Clock().Now()}))
	w.Account.ResetCalls()
	w.Account.Advance(15 * time.Second)
	require.NoError(t, w.Agent.Reconcile(ctx))
	require.Equal(t, 1, w.Account.Calls()["autoscaling:CancelInstanceRefresh"], "the pause read with the records cancels the refresh")
	require.Contains(t, w.Rollout(ctx, g.Name).Refresh.Cancel, "paused")
}

func refreshUnderWay(r state.Rollout) bool {
	return r.Phase == state.PhaseReplacing && r.Refresh != nil && r.Refresh.ID != ""
}

// rolloutReads is a store that counts the reads of rollout records (GetRollout).
type rolloutReads struct {
	state.Store
	reads atomic.Int64
}

func (s *rolloutReads) GetRollout(ctx context.Context, group string) (state.Rollout, error) {
	s.reads.Add(1)
	return s.Store.GetRollout(ctx, group)
}

// A launching action's look at a refresh group whose new instance does not serve yet asks whether the group's
// refresh halted (a launch of a halted refresh's AMI is abandoned at once) on the rollout record the agent
// keeps, not on a read of the store.
func TestALaunchingActionsLookUsesTheRolloutRecordTheAgentKeeps(t *testing.T) {
	g := refreshGroup(1)
	spec := oneGroup(&g)
	store := &rolloutReads{Store: state.NewMemory()}
	spec.Store = store
	w := buildRefresh(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	act := runToAction(t, w, g.Name, sim.TransitionLaunching, "no launch waiting",
		func(i sim.InstanceView) bool { return !i.AgentConnected })
	ev := events.Event{Kind: events.KindLifecycleAction, Lifecycle: &events.LifecycleAction{GroupName: act.Group,
		HookName: act.Hook, InstanceID: act.InstanceID, Token: act.Token, Transition: events.TransitionLaunching}}
	store.reads.Store(0)
	for range 3 {
		disp, err := w.Agent.Handle(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, events.Hold, disp, "the instance does not serve yet")
	}
	require.Zero(t, store.reads.Load(), "the kept record tells the refresh did not halt")
}

// The looks at a lifecycle action after its first ask EC2 whether its instance still exists at most once a
// minute: three looks within a minute of a check describe no instance, the look a minute after it does.
func TestALifecycleActionsInstanceIsDescribedAtMostOnceAMinute(t *testing.T) {
	g := refreshGroup(1)
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 2 * time.Minute // a drain that takes several minutes
	w := buildRefresh(t, spec)
	ctx := context.Background()
	w.PublishAMI(g.Parameter, testworld.ImageB)
	act := runToAction(t, w, g.Name, sim.TransitionTerminating, "no drain under way", drainingWithTasks)
	ev := events.Event{Kind: events.KindLifecycleAction, Lifecycle: &events.LifecycleAction{GroupName: act.Group,
		HookName: act.Hook, InstanceID: act.InstanceID, Token: act.Token, Transition: events.TransitionTerminating}}
	look := func() {
		disp, err := w.Agent.Handle(ctx, ev)
		require.NoError(t, err)
		require.Equal(t, events.Hold, disp, "the drain goes on")
	}
	w.Account.Advance(time.Minute)
	w.Account.ResetCalls()
	look()
	require.Equal(t, 1, w.Account.Calls()["ec2:DescribeInstances"], "the last check is a minute old")
	for range 3 {
		w.Account.Advance(10 * time.Second)
		look()
	}
	require.Equal(t, 1, w.Account.Calls()["ec2:DescribeInstances"], "within a minute of the check")
	w.Account.Advance(30 * time.Second)
	look()
	require.Equal(t, 2, w.Account.Calls()["ec2:DescribeInstances"], "a minute after it")
}

// runToAction runs the world a second at a time (for at most 2 hours) until an active lifecycle action of
// transition on an instance of group whose instance matches is waiting, and returns it; none is a failure
// saying what (with the rollout).
func runToAction(t *testing.T, w *testworld.World, group, transition, what string, match func(sim.InstanceView) bool) sim.LifecycleAction {
	t.Helper()
	var act sim.LifecycleAction
	found := func() bool {
		var acts []sim.LifecycleAction
		w.Account.Observe(func(v *sim.View) { acts = v.LifecycleActions() })
		for _, a := range acts {
			if !a.Active || a.Transition != transition {
				continue
			}
			for _, i := range w.Account.Group(group).Instances {
				if i.ID == a.InstanceID && match(i) {
					act = a
					return true
				}
			}
		}
		return false
	}
	ctx := context.Background()
	ok, err := w.RunUntil(ctx, time.Second, 2*time.Hour, found)
	require.NoError(t, err)
	require.True(t, ok, "%s: %+v", what, w.Rollout(ctx, group))
	return act
}

// drainingWithTasks matches an instance whose container instance is DRAINING with tasks still running.
func drainingWithTasks(i sim.InstanceView) bool {
	return i.ContainerInstanceStatus == "DRAINING" && i.TasksByLastStatus["RUNNING"] > 0
}

// indexOfInstance returns the index of instance id in g's instances (-1: none).
func indexOfInstance(g sim.GroupView, id string) int {
	for k, i := range g.Instances {
		if i.ID == id {
			return k
		}
	}
	return -1
}
