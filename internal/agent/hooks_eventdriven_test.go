package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// eventDrivenHeartbeats are the hook HeartbeatTimeouts the event-driven lifecycle tests run at: all of them
// shorter than the 2-minute safety poll, the shortest a third of the 20 s sweep's reach.
var eventDrivenHeartbeats = []time.Duration{60 * time.Second, 120 * time.Second, 180 * time.Second}

// eventDrivenWorld is one ECS group of 3 with the production defaults: wake-up events on, the wake-up queue,
// the 2-minute safety poll (drive it with RunEvents), and a drain that takes a while (tasks stop in stages).
func eventDrivenWorld(t *testing.T, hb time.Duration, wrap func(agent.Clients) agent.Clients) (*testworld.World, testworld.GroupSetup) {
	t.Helper()
	return eventDrivenWorldStopping(t, hb, 20*time.Second, wrap)
}

// eventDrivenWorldStopping is eventDrivenWorld with the tasks' stop stages stage apart (the drain takes about
// three stages).
func eventDrivenWorldStopping(t *testing.T, hb, stage time.Duration, wrap func(agent.Clients) agent.Clients) (*testworld.World, testworld.GroupSetup) {
	t.Helper()
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3, HeartbeatTimeout: hb}
	spec := oneGroup(&g)
	spec.WakeUpEvents, spec.WakeUpQueue = true, true
	spec.Sim.TaskStopStageDelay = stage
	spec.Wrap = wrap
	w := build(t, spec)
	_, err := w.RunEvents(context.Background(), 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	return w, g
}

// scaleInOne scales the group in by one and returns the instance Auto Scaling put in Terminating:Wait and when.
func scaleInOne(t *testing.T, w *testworld.World, g testworld.GroupSetup) (string, time.Time) {
	t.Helper()
	before := map[string]bool{}
	for _, i := range w.Account.Group(g.Name).Instances {
		if i.LifecycleState == "InService" {
			before[i.ID] = true
		}
	}
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, g.Desired-1))
	w.Checker.Baseline[g.Name] = g.Desired - 1
	for _, i := range w.Account.Group(g.Name).Instances {
		if before[i.ID] && i.LifecycleState == "Terminating:Wait" {
			return i.ID, w.Account.Clock().Now()
		}
	}
	t.Fatalf("no instance of %s in Terminating:Wait after the scale-in", g.Name)
	return "", time.Time{}
}

// requireKeptAlive requires one accepted CONTINUE by the agent for instance's action (drained first when
// drained is set), and that no stretch from start (when the action began) through its heartbeats to that
// completion was as long as hb: the action never came near its heartbeat timeout.
func requireKeptAlive(t *testing.T, w *testworld.World, instance string, start time.Time, hb time.Duration, drained bool) {
	t.Helper()
	cs := completionsOf(w, instance)
	require.Len(t, cs, 1, "one accepted completion of the action of %s, not a timeout", instance)
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	if drained {
		require.True(t, cs[0].Drained, "drained before CONTINUE")
	}
	last, beats := start, []string{}
	for _, h := range w.Account.Heartbeats() {
		if h.InstanceID != instance || !h.Accepted {
			continue
		}
		require.Less(t, h.At.Sub(last), hb, "heartbeat at +%s came %s after the last one", h.At.Sub(start), h.At.Sub(last))
		last = h.At
		beats = append(beats, "+"+h.At.Sub(start).String())
	}
	t.Logf("HeartbeatTimeout %s: heartbeats at %v, completed at +%s", hb, beats, cs[0].At.Sub(start))
	require.Less(t, cs[0].At.Sub(last), hb, "completion at +%s came %s after the last heartbeat", cs[0].At.Sub(start), cs[0].At.Sub(last))
}

// Field cases C4 (heartbeat) and the lost lifecycle message, event-driven: the first ReceiveMessage answer
// that carries the terminating action is lost, so the message stays invisible for the consumer's 2-minute
// visibility timeout — as long as or longer than the hook's HeartbeatTimeout — and the safety poll is 2
// minutes apart. The lifecycle sweep finds the instance in Terminating:Wait, takes the action up, drains it
// with heartbeats inside every timeout window and completes it with CONTINUE; the late message drains nothing
// more. Before the sweep, 60-180 s timeouts saw no heartbeat and the instance terminated undrained.
func TestC4LostLifecycleMessageEventDrivenIsDrainedHeartbeatedAndCompleted(t *testing.T) {
	for _, hb := range eventDrivenHeartbeats {
		t.Run(hb.String(), func(t *testing.T) {
			ctx := context.Background()
			losing := &losingSQS{}
			w, g := eventDrivenWorld(t, hb, func(c agent.Clients) agent.Clients {
				losing.SQS = c.SQS
				c.SQS = losing
				return c
			})
			losing.armed = true
			drainsBefore := w.Account.Calls()["ecs:UpdateContainerInstancesState"]
			instance, start := scaleInOne(t, w, g)
			done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, instance)) > 0 })
			require.NoError(t, err)
			require.True(t, done, "the action is completed")
			require.Equal(t, 1, losing.lost, "the message's first receive was lost")
			_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false }) // the late message comes back
			require.NoError(t, err)
			requireKeptAlive(t, w, instance, start, hb, true)
			visible, inFlight := w.Account.QueueDepth(w.QueueURL)
			require.Zero(t, visible+inFlight, "the late message is deleted")
			require.Equal(t, 1, w.Account.Calls()["ecs:UpdateContainerInstancesState"]-drainsBefore, "one drain, not two")
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// Field case C4, event-driven: the agent dies right after receiving the terminating action (a deploy, an OOM
// kill): the message is invisible for the 2-minute visibility timeout of the dead agent's receive. The fresh
// agent's lifecycle sweep takes the action up, drains it with heartbeats inside every timeout window and
// completes it with CONTINUE.
func TestC4AgentDiesAfterReceivingTheLifecycleActionEventDrivenStillDrainsAndHeartbeats(t *testing.T) {
	for _, hb := range eventDrivenHeartbeats {
		t.Run(hb.String(), func(t *testing.T) {
			ctx := context.Background()
			w, g := eventDrivenWorld(t, hb, nil)
			instance, start := scaleInOne(t, w, g)
			out, err := w.Account.SQS().ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL),
				MaxNumberOfMessages: 10, VisibilityTimeout: 120}) // the dying agent's receive
			require.NoError(t, err)
			require.Len(t, out.Messages, 1)
			w.Restart(nil)
			done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, instance)) > 0 })
			require.NoError(t, err)
			require.True(t, done, "the action is completed")
			_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false })
			require.NoError(t, err)
			requireKeptAlive(t, w, instance, start, hb, true)
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// Field case C18, event-driven: the message of a launch into the warm pool (Warmed:Pending:Wait) is lost.
// DescribeAutoScalingGroups does not list pool instances; the lifecycle sweep reads the pool
// (DescribeWarmPool, as AdoptWaiting decides) and completes the launch with CONTINUE before its
// HeartbeatTimeout, instead of letting the hook's default result (ABANDON) terminate it.
func TestC18LostWarmPoolLaunchEventDrivenIsCompletedBeforeItsDefaultResult(t *testing.T) {
	for _, hb := range eventDrivenHeartbeats {
		t.Run(hb.String(), func(t *testing.T) {
			ctx := context.Background()
			g := testworld.GroupSetup{Name: "warm", Min: 1, Max: 4, Desired: 2, HeartbeatTimeout: hb}
			spec := oneGroup(&g)
			spec.WakeUpEvents, spec.WakeUpQueue = true, true
			losing := &losingSQS{}
			spec.Wrap = func(c agent.Clients) agent.Clients {
				losing.SQS = c.SQS
				c.SQS = losing
				return c
			}
			w := build(t, spec)
			require.NoError(t, w.Account.PutLifecycleHook(g.Name, sim.HookSpec{Name: launchHook, Transition: sim.TransitionLaunching,
				HeartbeatTimeout: hb, DefaultResult: sim.ResultAbandon, QueueURL: w.QueueURL}))
			require.NoError(t, w.Account.PutWarmPool(g.Name, sim.WarmPoolSpec{MinSize: 1, MaxGroupPreparedCapacity: aws.Int32(2)}))
			_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
			require.NoError(t, err)
			before := poolOf(w, g.Name)
			losing.armed = true
			require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 3))
			start := w.Account.Clock().Now()
			var warming string
			for id := range poolOf(w, g.Name) {
				if _, ok := before[id]; !ok {
					warming = id // its launch waits on the launching hook from now on, at the latest (start is early)
				}
			}
			require.NotEmpty(t, warming)
			var waitAt time.Time // when the launch began to wait on the launching hook (Warmed:Pending:Wait)
			done, err := w.RunEvents(ctx, 30*time.Minute, func() bool {
				if waitAt.IsZero() && poolOf(w, g.Name)[warming].LifecycleState == "Warmed:Pending:Wait" {
					waitAt = w.Account.Clock().Now()
				}
				return len(completionsOf(w, warming)) > 0
			})
			require.NoError(t, err)
			require.True(t, done, "the launch into the pool is completed")
			require.Equal(t, 1, losing.lost, "the message's first receive was lost")
			require.False(t, waitAt.IsZero())
			t.Logf("waited from +%s", waitAt.Sub(start))
			requireKeptAlive(t, w, warming, waitAt, hb, false)
			for _, term := range w.Account.Terminations() {
				require.NotEqual(t, warming, term.InstanceID, "the warming instance is not abandoned")
			}
			require.Empty(t, w.Checker.Finish())
		})
	}
}

// The lifecycle sweep's cost: one DescribeAutoScalingGroups per hundred groups with hooks of the agent's per
// sweep (every 10 s with 60 s timeouts: hooksweep.go sweepInterval), whatever their instances; an idle fleet's
// other calls are the safety poll's. Measured over 10 quiet minutes with 1, 100 and 150 groups (docs/performance.md).
func TestLifecycleSweepCallsGrowWithTimeAndGroupsNotInstances(t *testing.T) {
	for _, tc := range []struct {
		groups, desired int
		perMinute       float64 // sweep DescribeAutoScalingGroups per minute, besides the passes' discovery
	}{{1, 3, 5.5}, {1, 12, 5.5}, {100, 2, 5.5}, {150, 2, 11}} {
		t.Run(fmt.Sprintf("groups=%d,instances=%d", tc.groups, tc.desired), func(t *testing.T) {
			ctx := context.Background()
			spec := testworld.Spec{WakeUpEvents: true, WakeUpQueue: true}
			for i := range tc.groups {
				spec.Groups = append(spec.Groups, testworld.GroupSetup{Name: fmt.Sprintf("g%03d", i), Cluster: "c", Parameter: "/golden/fleet",
					Min: 1, Max: int32(tc.desired) + 1, Desired: int32(tc.desired), HeartbeatTimeout: 60 * time.Second})
			}
			w := build(t, spec)
			_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
			require.NoError(t, err)
			w.Account.ResetCalls()
			const minutes = 10
			_, err = w.RunEvents(ctx, minutes*time.Minute, func() bool { return false })
			require.NoError(t, err)
			calls := w.Account.Calls()
			describe := calls["autoscaling:DescribeAutoScalingGroups"]
			fullPasses := minutes * time.Minute / (2 * time.Minute) // each full pass discovers: one page per 100 groups
			pages := (tc.groups + 99) / 100
			sweeps := describe - int(fullPasses)*pages
			perMinute := float64(sweeps) / minutes
			t.Logf("%d groups x %d instances: DescribeAutoScalingGroups %d in %d min (sweep %.1f/min), all calls %v", tc.groups, tc.desired, describe, minutes, perMinute, calls)
			// Every 10 s, but a full pass (every 2 minutes) resets the sweep's timer: 11 sweeps per 2 minutes,
			// each one call per hundred groups.
			require.InDelta(t, tc.perMinute, perMinute, 0.3, "sweeps per minute x calls per sweep")
			require.Zero(t, calls["autoscaling:DescribeAutoScalingInstances"], "nothing waits: the sweep confirms nothing")
			require.LessOrEqual(t, calls["autoscaling:DescribeLifecycleHooks"], tc.groups, "the sweep describes no hooks: only the poll's hook check does, every 10 minutes")
		})
	}
}

// Field case C4, a late message nothing else takes up: the lifecycle sweep and the reconcile loop adopt
// actions of managed groups only, so a misconfigured group's (a tag typo: still drained, never rolled) lost
// message is the one way its action is known. It comes back after the 2-minute visibility timeout, with the
// 150 s HeartbeatTimeout running since the action began. The first heartbeat is counted from the message's
// SentTimestamp, so it goes at once on that late receive instead of 50 s later (after the timeout), and the
// instance is drained and completed with CONTINUE.
func TestC4LateLifecycleMessageGetsItsFirstHeartbeatCountedFromItsSentTimestamp(t *testing.T) {
	ctx := context.Background()
	hb := 150 * time.Second
	g := testworld.GroupSetup{Name: "typo", Min: 1, Max: 4, Desired: 3, HeartbeatTimeout: hb, Tags: map[string]string{model.TagMinAMIAge: "7d"}}
	spec := oneGroup(&g)
	spec.WakeUpEvents, spec.WakeUpQueue = true, true
	spec.Sim.TaskStopStageDelay = time.Minute // a drain that outlasts what is left of the timeout
	losing := &losingSQS{}
	spec.Wrap = func(c agent.Clients) agent.Clients {
		losing.SQS = c.SQS
		c.SQS = losing
		return c
	}
	w := build(t, spec)
	_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
	require.NoError(t, err)
	losing.armed = true
	instance, start := scaleInOne(t, w, g)
	done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, instance)) > 0 })
	require.NoError(t, err)
	require.True(t, done, "the action is completed")
	require.Equal(t, 1, losing.lost, "the message's first receive was lost")
	var beats []time.Duration
	for _, h := range w.Account.Heartbeats() {
		if h.InstanceID == instance && h.Accepted {
			beats = append(beats, h.At.Sub(start))
		}
	}
	require.NotEmpty(t, beats)
	require.GreaterOrEqual(t, beats[0], 2*time.Minute, "no heartbeat before the message came back (nothing adopts it)")
	require.Less(t, beats[0], 2*time.Minute+10*time.Second, "the first heartbeat goes on the late receive")
	requireKeptAlive(t, w, instance, start, hb, true)
	require.Empty(t, w.Checker.Finish())
}

// TestLifecycleSweepTakesTheGroupsFromALookOfTheSameTurn: the lifecycle sweep (every 20 s here: a 120 s
// HeartbeatTimeout) uses the DescribeAutoScalingGroups answer of a look made in the same turn of the loop
// instead of describing the groups again, running early once it is in the second half of its interval, and
// counts its next run from that answer; a look in the first half leaves the sweep's time alone, and with no
// look the sweep describes the groups itself — every hooked group is seen at least every 20 s.
func TestLifecycleSweepTakesTheGroupsFromALookOfTheSameTurn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		after     time.Duration // since the full pass that last looked for lifecycle actions
		look      bool          // an operator wake-up makes the turn look at the group
		nextSweep time.Duration // when the turn says the loop looks next, since the full pass
	}{
		{name: "look in the second half: the sweep rides on its answer", after: 12 * time.Second, look: true, nextSweep: 32 * time.Second},
		{name: "look in the first half: the sweep keeps its time", after: 5 * time.Second, look: true, nextSweep: 20 * time.Second},
		{name: "no look when due: the sweep describes the group", after: 20 * time.Second, nextSweep: 40 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			g := testworld.GroupSetup{Name: "g", Cluster: "c", Parameter: "/golden-ami/g", Min: 2, Max: 3, Desired: 2, HeartbeatTimeout: 120 * time.Second}
			spec := oneGroup(&g)
			spec.WakeUpEvents = true
			w := build(t, spec)
			_, err := w.RunEvents(ctx, 5*time.Minute, func() bool { return false })
			require.NoError(t, err)
			require.NoError(t, w.Agent.Reconcile(ctx)) // the full pass: lifecycle actions looked for now
			pass := w.Account.Clock().Now()
			w.Account.Advance(tc.after)
			if tc.look {
				sendOperatorWakeUp(t, w, events.OperatorWakeUp{Action: events.OperatorApprove, Group: g.Name, Who: "arn:aws:sts::111122223333:assumed-role/ops/alice"})
			}
			before := w.Account.Calls()["autoscaling:DescribeAutoScalingGroups"]

			next, err := w.Agent.Step(ctx)
			require.NoError(t, err)
			require.Equal(t, before+1, w.Account.Calls()["autoscaling:DescribeAutoScalingGroups"], "one DescribeAutoScalingGroups in the turn, look and sweep together")
			require.Equal(t, pass.Add(tc.nextSweep), next, "the next sweep")
			require.Empty(t, w.Checker.Check())
		})
	}
}
