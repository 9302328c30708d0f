package agent_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// sendScheduledTick puts the EventBridge schedule rule's "Scheduled Event" on the agent's queue (Amazon
// EventBridge User Guide, "Creating a rule that runs on a schedule"; the sample in
// internal/events/testdata/scheduled-event.json).
func sendScheduledTick(w *testworld.World, id string) {
	now := w.Account.Clock().Now().UTC().Format(time.RFC3339)
	w.Account.SendMessage(w.QueueURL, fmt.Sprintf(`{"version":"0","id":%q,"detail-type":"Scheduled Event","source":"aws.events","account":"111122223333","time":%q,"region":"us-east-1","resources":["arn:aws:events:us-east-1:111122223333:rule/patch-agent-schedule"],"detail":{}}`, id, now))
}

// TestGoldenAMIChangeIsNotQueuedBehindAFleetPass: a scheduled tick and then a golden-AMI parameter change for
// group b arrive while the loop's whole-fleet pass is stuck in its look at group a, and the consumer handles
// one message at a time. The tick's handler does not run (or wait for) a fleet pass: it resolves the
// parameters, wakes the loop and holds its message, so the change right behind it starts b's rollout while
// the pass is still blocked. The tick's message is deleted only once a pass that began after it has finished:
// not when the blocked pass (begun before it) ends, but after the next one.
func TestGoldenAMIChangeIsNotQueuedBehindAFleetPass(t *testing.T) {
	w, obs, pass, _ := blockedPass(t, "a")
	w.Agent.Consumer.Concurrency = 1 // as in fault worlds: the change waits for whatever the tick's handling waits for
	ctx := context.Background()
	sendScheduledTick(w, "tick-1")
	w.PublishAMI("/golden/b", testworld.ImageB)

	select {
	case err := <-pollAside(w):
		require.NoError(t, err)
	case <-time.After(realTimeout):
		t.Fatal("the golden-AMI change waited behind the blocked fleet pass")
	}
	require.Equal(t, testworld.ImageB, w.Rollout(ctx, "b").TargetImageID, "b's rollout began while the pass was blocked")
	require.EqualValues(t, 1, w.Agent.Consumer.Stats.Held.Load(), "the tick's message is held until its pass finished")

	close(obs.release)
	require.NoError(t, <-pass)
	_, err := w.Agent.Consumer.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.EqualValues(t, 1, w.Agent.Consumer.Stats.Held.Load(), "the pass that began before the tick does not serve it")

	require.NoError(t, w.Agent.Reconcile(ctx)) // the pass the tick asked for
	_, err = w.Agent.Consumer.PollOnce(ctx, 0)
	require.NoError(t, err)
	require.Zero(t, w.Agent.Consumer.Stats.Held.Load(), "served: the tick's message is deleted")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "nothing left on the queue")
	require.Empty(t, w.Checker.Check())
}

// TestAScheduledTickWakesTheLoopForAWholeFleetPass: a scheduled tick received by Step (the loop's turn on a
// simulated clock) between two safety polls runs the whole-fleet pass in the same turn, and the message is
// deleted at the next receive; a tick's AMI change therefore reaches every group without waiting for the
// safety poll.
func TestAScheduledTickWakesTheLoopForAWholeFleetPass(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 2, Desired: 1, Parameter: "/aws/service/ecs/optimized-ami/amazon-linux-2023/recommended/image_id"}
	spec := oneGroup(&g)
	spec.WakeUpEvents = true // the safety poll at minutes: only the tick can start the pass in time
	w := build(t, spec)
	ctx := context.Background()
	_, err := w.Agent.Step(ctx) // the first full pass: the group Idle on its AMI
	require.NoError(t, err)
	before := w.Agent.LastTick()
	w.Account.Advance(10 * time.Second)
	w.PublishPublicAMI(g.Parameter, testworld.ImageB)
	_, err = w.Agent.Step(ctx)
	require.NoError(t, err)
	require.True(t, w.Agent.LastTick().After(before), "the tick ran a whole-fleet pass in the same turn, before the safety poll")
	require.Equal(t, testworld.ImageB, w.Rollout(ctx, g.Name).TargetImageID)
	_, err = w.Agent.Step(ctx)
	require.NoError(t, err)
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "the tick's message is deleted once its pass finished")
}

// TestHeartbeatsAndReactionsTakeTheLimitersPriorityLane: every lifecycle action heartbeat, and the launch
// template version a golden-AMI change creates, are sent with the priority mark the client-side limiter lets
// go before a fleet pass's reads (awsapi.WithUrgent; the lane itself: internal/awsapi
// TestUrgentRequestGoesBeforeWaitingFleetReads); the fleet passes' discovery is not.
func TestHeartbeatsAndReactionsTakeTheLimitersPriorityLane(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2, HeartbeatTimeout: 300 * time.Second}
	spec := oneGroup(&g)
	spec.Sim.TaskStopStageDelay = 200 * time.Second // tasks need 600 s to stop: heartbeats are due
	faults := sim.NewFaults(1, nil)
	faults.Pause(true) // no faults: only the counts
	spec.Faults = faults
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	done, err := w.RunUntil(context.Background(), tick, 2*time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done)
	w.PublishAMI(g.Parameter, testworld.ImageB)
	require.NoError(t, w.Agent.RunOnce(context.Background()))

	st := faults.Stats()
	const hb = "autoscaling:RecordLifecycleActionHeartbeat"
	require.Positive(t, st.Calls[hb], "the drain needed heartbeats")
	require.Equal(t, st.Calls[hb], st.Urgent[hb], "every heartbeat took the priority lane")
	require.Positive(t, st.Urgent["ec2:CreateLaunchTemplateVersion"], "the golden-AMI change's launch template version took it")
	require.Less(t, st.Urgent["autoscaling:DescribeAutoScalingGroups"], st.Calls["autoscaling:DescribeAutoScalingGroups"],
		"the fleet passes' discovery did not")
}

// clockStepObserver advances the world's clock by step at every look at a target, so that a pass's budget runs
// out after a known number of looks, and counts the looks per group.
type clockStepObserver struct {
	model.NopObserver
	w     **testworld.World
	step  time.Duration
	mu    sync.Mutex
	looks map[string]int
}

func (o *clockStepObserver) TargetObserved(t model.Target, _ model.GroupView, _ state.Rollout, _ *model.ResolvedAMI) {
	o.mu.Lock()
	o.looks[t.Group]++
	o.mu.Unlock()
	(*o.w).Account.Advance(o.step)
}

// TestAPassThatYieldsLeavesNoTargetOutForever: every look takes 3 s of the clock and a pass hands out targets
// for 8 s (Settings.PassBudget's default), so a full pass over 6 groups yields after 3 looks. The next full
// pass begins with the targets the last one left out: within two passes every group is looked at, and over
// six passes each the same number of times (a pass always beginning at the first group would never reach
// the last three).
func TestAPassThatYieldsLeavesNoTargetOutForever(t *testing.T) {
	var groups []testworld.GroupSetup
	for i := range 6 {
		groups = append(groups, testworld.GroupSetup{Name: fmt.Sprintf("g%d", i), Cluster: "c1", Parameter: "/golden/fleet", Min: 1, Max: 2, Desired: 1})
	}
	var w *testworld.World
	obs := &clockStepObserver{w: &w, looks: map[string]int{}}
	w = build(t, testworld.Spec{Groups: groups, Observer: obs})
	settle(t, w, 30*time.Second)
	ctx := context.Background()
	obs.step = 3 * time.Second
	obs.mu.Lock()
	obs.looks = map[string]int{}
	obs.mu.Unlock()
	for range 2 {
		require.NoError(t, w.Agent.Reconcile(ctx))
	}
	obs.mu.Lock()
	require.Len(t, obs.looks, 6, "every group looked at within two cut passes: %v", obs.looks)
	obs.mu.Unlock()
	for range 4 {
		require.NoError(t, w.Agent.Reconcile(ctx))
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, g := range groups {
		require.Equal(t, 3, obs.looks[g.Name], "six passes of three looks: each group three times (%v)", obs.looks)
	}
	require.Empty(t, w.Checker.Check())
}

// TestIdleGroupsGetTheirVersionWhileEveryPassIsCut, so that the launch template versions of a 1,000 x 20 fleet
// do not stall at about 280 of 1,000 groups: one shared parameter names a new AMI for 9 groups; every look
// takes 3 s of the clock and a pass hands out targets for 8 s, so every pass is cut after 3 looks and the
// groups already rolling are looked at again and again beside the Idle ones. A pass that began mid-fleet and
// wrapped round must resume after its last target, not at the first group by name: within three passes every
// group is looked at once, over six each exactly twice, and within six passes every group's refresh of its new
// launch template version is started. (Resuming at the smallest name left out would send every second pass back to g0: g6,
// g7 and g8 would never be looked at and never get their version.)
func TestIdleGroupsGetTheirVersionWhileEveryPassIsCut(t *testing.T) {
	var groups []testworld.GroupSetup
	for i := range 9 {
		groups = append(groups, testworld.GroupSetup{Name: fmt.Sprintf("g%d", i), Cluster: "c1", Parameter: "/golden/fleet", Min: 1, Max: 2, Desired: 1})
	}
	var w *testworld.World
	obs := &clockStepObserver{w: &w, looks: map[string]int{}}
	w = build(t, testworld.Spec{Groups: groups, Observer: obs})
	settle(t, w, 30*time.Second)
	ctx := context.Background()
	w.RegisterAMI(testworld.ImageB)
	w.Account.PutParameter("/golden/fleet", testworld.ImageB) // no message: the pass's poll finds it
	w.Account.Advance(11 * time.Minute)                       // the parameter poll (10 min) is due
	obs.mu.Lock()
	obs.step, obs.looks = 3*time.Second, map[string]int{}
	obs.mu.Unlock()
	for range 3 {
		require.NoError(t, w.Agent.Reconcile(ctx))
	}
	obs.mu.Lock()
	require.Len(t, obs.looks, 9, "every group looked at within three cut passes: %v", obs.looks)
	obs.mu.Unlock()
	for range 3 {
		require.NoError(t, w.Agent.Reconcile(ctx))
	}
	obs.mu.Lock()
	for _, g := range groups {
		require.Equal(t, 2, obs.looks[g.Name], "six passes of three looks over nine groups: each twice (%v)", obs.looks)
	}
	obs.mu.Unlock()
	for _, g := range groups {
		requireRefreshOnNewVersion(t, w, g.Name)
	}
	require.Empty(t, w.Checker.Check())
}

// TestALookAtAFewTargetsDescribesOnlyThoseGroups, so that at 1,000 groups a reaction does not read all 10 pages
// of DescribeAutoScalingGroups before it looks at its one group. 250 fleet groups (three pages of 100) and
// group solo on its own golden-AMI parameter. The change of solo's parameter is handled with one
// DescribeAutoScalingGroups call, naming solo (providers.DiscoverNamed), and still starts solo's refresh of its
// new launch template version from that fresh description; the instances' AMIs the agent cached for the other groups are
// kept (the next full pass does not describe 500 instances again); the next full pass — the safety poll — reads
// every page again and sees all 251 groups.
func TestALookAtAFewTargetsDescribesOnlyThoseGroups(t *testing.T) {
	groups := []testworld.GroupSetup{{Name: "solo", Cluster: "c-solo", Parameter: "/golden/solo", Min: 2, Max: 3, Desired: 2}}
	for i := range 250 {
		groups = append(groups, testworld.GroupSetup{Name: fmt.Sprintf("f%03d", i), Cluster: fmt.Sprintf("c%02d", i/10), Parameter: "/golden/fleet", Min: 2, Max: 3, Desired: 2})
	}
	w := build(t, testworld.Spec{Groups: groups, Workers: 4})
	ctx := context.Background()
	require.NoError(t, w.Agent.Reconcile(ctx))
	for visible, _ := w.Account.QueueDepth(w.QueueURL); visible > 0; visible, _ = w.Account.QueueDepth(w.QueueURL) {
		_, err := w.Agent.Consumer.PollOnce(ctx, 0) // the launches' messages of the build
		require.NoError(t, err)
	}
	cached := w.Agent.CachedImages()
	require.Equal(t, 502, cached, "every instance's AMI cached by the full pass")
	const describe = "autoscaling:DescribeAutoScalingGroups"

	before := w.Account.Calls()
	w.PublishAMI("/golden/solo", testworld.ImageB)
	_, err := w.Agent.Consumer.PollOnce(ctx, 0)
	require.NoError(t, err)
	after := w.Account.Calls()
	require.Equal(t, 1, after[describe]-before[describe], "the reaction describes solo by name, not every page of the fleet")
	require.Equal(t, testworld.ImageB, w.Rollout(ctx, "solo").TargetImageID)
	requireRefreshOnNewVersion(t, w, "solo")
	require.Equal(t, cached, w.Agent.CachedImages(), "the look kept the other groups' cached AMIs")

	before = w.Account.Calls()
	require.NoError(t, w.Agent.Reconcile(ctx))
	after = w.Account.Calls()
	require.Equal(t, 3, after[describe]-before[describe], "the safety poll reads every page")
	require.Empty(t, w.Checker.Check())
}
