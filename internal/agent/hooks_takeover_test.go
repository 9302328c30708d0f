package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// actorCalls counts, per acting replica (the test says which one runs), the lifecycle action calls and ECS
// drains the agents make, and calls the crash function (when set) right after a DRAINING took effect.
type actorCalls struct {
	awsapi.AutoScaling
	ecs   awsapi.ECS
	mu    sync.Mutex
	actor string
	calls map[string]map[string]int // actor -> call -> count
	// onDrain, when set, is called after an accepted UpdateContainerInstancesState to DRAINING.
	onDrain func()
}

func (c *actorCalls) setActor(a string) {
	c.mu.Lock()
	c.actor = a
	c.mu.Unlock()
}

func (c *actorCalls) count(call string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]map[string]int{}
	}
	if c.calls[c.actor] == nil {
		c.calls[c.actor] = map[string]int{}
	}
	c.calls[c.actor][call]++
}

func (c *actorCalls) by(actor, call string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[actor][call]
}

func (c *actorCalls) RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, o ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	c.count("RecordLifecycleActionHeartbeat")
	return c.AutoScaling.RecordLifecycleActionHeartbeat(ctx, in, o...)
}

func (c *actorCalls) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, o ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	c.count("CompleteLifecycleAction")
	return c.AutoScaling.CompleteLifecycleAction(ctx, in, o...)
}

// drainingECS is the ECS client of actorCalls: it counts DRAINING requests.
type drainingECS struct {
	awsapi.ECS
	c *actorCalls
}

func (e drainingECS) UpdateContainerInstancesState(ctx context.Context, in *ecs.UpdateContainerInstancesStateInput, o ...func(*ecs.Options)) (*ecs.UpdateContainerInstancesStateOutput, error) {
	out, err := e.ECS.UpdateContainerInstancesState(ctx, in, o...)
	if err == nil && in.Status == "DRAINING" {
		e.c.count("DRAINING")
		if e.c.onDrain != nil {
			e.c.onDrain()
		}
	}
	return out, err
}

// wrap installs c on an incarnation's clients (testworld.Spec.Wrap).
func (c *actorCalls) wrap(cl agent.Clients) agent.Clients {
	c.AutoScaling, c.ecs = cl.AutoScaling, cl.ECS
	cl.AutoScaling = c
	cl.ECS = drainingECS{ECS: cl.ECS, c: c}
	return cl
}

// crashPoint is where the first incarnation dies while it works on a terminating lifecycle action.
type crashPoint struct {
	name string
	// onHook blows the fuse after a lifecycle action record write; drain blows it right after the drain took
	// effect (ECS DRAINING accepted).
	onHook func(state.Hook) bool
	drain  bool
}

var (
	crashRightAfterRecording = crashPoint{name: "right after recording the action", onHook: func(h state.Hook) bool {
		return h.Confirmed && h.State == state.HookDraining && !h.AgentDrained && h.LastHeartbeat.IsZero()
	}}
	crashAfterTheDrainStarted = crashPoint{name: "after the drain started", drain: true}
	crashAfterAHeartbeat      = crashPoint{name: "after a heartbeat", onHook: func(h state.Hook) bool {
		return h.State == state.HookDraining && !h.LastHeartbeat.IsZero()
	}}
)

// crashWhileWorking builds the event-driven world (hb, a drain that takes a while), arms its agent to die at
// cp, scales the group in by one and runs until the agent died. It returns the world, the action's instance,
// when it began to wait, the drains before the scale-in and the call counter.
func crashWhileWorking(t *testing.T, hb time.Duration, cp crashPoint) (*testworld.World, string, time.Time, *actorCalls, *testworld.Fuse) {
	t.Helper()
	calls := &actorCalls{}
	// The drain outlasts the first heartbeat (a third of hb), so that a crash after a heartbeat comes while it
	// still drains.
	w, g := eventDrivenWorldStopping(t, hb, max(20*time.Second, hb/3), calls.wrap)
	fuse := &testworld.Fuse{OnHook: cp.onHook}
	if cp.drain {
		calls.onDrain = func() {
			if !fuse.Blown() {
				fuse.Blow()
			}
		}
	}
	w.Restart(fuse)
	calls.setActor("first")
	instance, start := scaleInOne(t, w, g)
	_, err := w.RunEvents(context.Background(), 10*time.Minute, fuse.Blown)
	if !fuse.Blown() {
		require.NoError(t, err)
	}
	require.True(t, fuse.Blown(), "the agent died %s", cp.name)
	require.Empty(t, completionsOf(w, instance), "the action is not completed when the agent dies")
	calls.onDrain = nil
	return w, instance, start, calls, fuse
}

// restartAs replaces the dead incarnation: the same --owner-id (a process restarted in place) or a new one
// (a new task or pod: another host name).
func restartAs(w *testworld.World, owner string) {
	if owner == "" {
		w.Restart(nil)
		return
	}
	w.Agent = w.NewReplica(owner)
	w.Restarts++
}

// Field cases C4 and C19's family, event-driven: the agent dies right after recording a terminating lifecycle
// action from its message (confirmed, claimed, nothing drained, no heartbeat yet). Its message stays invisible
// for the dead receive's 2-minute visibility timeout; a lifecycle sweep that skipped the record ("its message
// drives it") would let the action time out with a 60-120 s HeartbeatTimeout and the instance terminate
// undrained. The fresh incarnation — the same --owner-id or a new one — heartbeats it before its timeout (a new
// owner while the dead one's claim is live: heartbeats only), takes it over (the same owner at once, a new one
// once the dead claim expired), drains it and completes it with CONTINUE once drained; the message, when it
// comes back, drains nothing more and is deleted.
func TestC4AgentDiesRightAfterRecordingTheLifecycleActionIsTakenOverHeartbeatedDrainedAndCompleted(t *testing.T) {
	for _, hb := range eventDrivenHeartbeats {
		for _, owner := range []string{"", "incarnation-2"} {
			name := hb.String() + "/same owner"
			if owner != "" {
				name = hb.String() + "/new owner"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				w, instance, start, calls, _ := crashWhileWorking(t, hb, crashRightAfterRecording)
				require.Zero(t, calls.by("first", "DRAINING"), "nothing drained before the crash")
				restartAs(w, owner)
				calls.setActor("second")
				done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, instance)) > 0 })
				require.NoError(t, err)
				require.True(t, done, "the action is completed")
				_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false }) // the message comes back
				require.NoError(t, err)
				requireKeptAlive(t, w, instance, start, hb, true)
				require.Equal(t, 1, calls.by("second", "DRAINING"), "one drain, by the fresh incarnation")
				require.Equal(t, 1, calls.by("second", "CompleteLifecycleAction"), "one completion, never a second")
				visible, inFlight := w.Account.QueueDepth(w.QueueURL)
				require.Zero(t, visible+inFlight, "the message that came back is deleted")
				rec, err := w.Store.GetHook(ctx, model.ActionKey("g", instance, testworld.HookName))
				require.NoError(t, err)
				require.Equal(t, state.HookCompleted, rec.State)
				if owner == "" {
					require.True(t, rec.Adopted, "the same owner's restart takes the record over at once, before its message comes back")
				}
				require.Empty(t, w.Checker.Finish())
			})
		}
	}
}

// Field case C4, event-driven: the agent dies after the drain started (ECS DRAINING accepted, no heartbeat
// yet) or after a heartbeat (recorded), and a new incarnation with another --owner-id starts: the dead owner's
// claim is live for up to 2.5 minutes (TTL plus skew margin) and its message invisible for up to 2. For 60,
// 120 and 180 s HeartbeatTimeouts the action is heartbeated inside every timeout window from the moment it
// began, completed once with CONTINUE once drained, and the instance is never set DRAINING a second time.
func TestC4AgentDiesWhileDrainingTheActionStaysHeartbeatedUntilItsClaimExpiresAndIsCompletedOnce(t *testing.T) {
	for _, hb := range eventDrivenHeartbeats {
		for _, cp := range []crashPoint{crashAfterTheDrainStarted, crashAfterAHeartbeat} {
			t.Run(hb.String()+"/"+cp.name, func(t *testing.T) {
				ctx := context.Background()
				w, instance, start, calls, _ := crashWhileWorking(t, hb, cp)
				require.Equal(t, 1, calls.by("first", "DRAINING"), "the dead incarnation started the drain")
				restartAs(w, "incarnation-2")
				calls.setActor("second")
				done, err := w.RunEvents(ctx, 30*time.Minute, func() bool { return len(completionsOf(w, instance)) > 0 })
				require.NoError(t, err)
				require.True(t, done, "the action is completed")
				_, err = w.RunEvents(ctx, 10*time.Minute, func() bool { return false })
				require.NoError(t, err)
				requireKeptAlive(t, w, instance, start, hb, true)
				require.Zero(t, calls.by("second", "DRAINING"), "the drain is not started again")
				require.Equal(t, 1, calls.by("second", "CompleteLifecycleAction"), "one completion")
				visible, inFlight := w.Account.QueueDepth(w.QueueURL)
				require.Zero(t, visible+inFlight, "the message is deleted")
				require.Empty(t, w.Checker.Finish())
			})
		}
	}
}

// stepBoth steps replicas a then b (each its own Step, the acting replica named for calls), and moves the
// clock by step.
func stepBoth(t *testing.T, w *testworld.World, calls *actorCalls, names []string, replicas []*agent.Agent, step time.Duration) {
	t.Helper()
	for i, a := range replicas {
		calls.setActor(names[i])
		_, _ = a.Step(context.Background())
		require.Empty(t, w.Checker.Check())
	}
	w.Account.Advance(step)
	require.Empty(t, w.Checker.Check())
}

// Invariant 6 with the take-over rule (field case C4's family): two event-driven replicas on one table and
// queue, a 60 s HeartbeatTimeout and a drain that takes minutes. The replica that received the message owns the
// action and keeps it: the other one's lifecycle sweep sees the message-driven record every 20 s and never
// takes it over, heartbeats, drains or completes it while the owner's claim is live; the owner completes it
// once, with CONTINUE once drained.
func TestC4LiveOwnerKeepsItsLifecycleActionTheOtherReplicaNeverTakesItOver(t *testing.T) {
	ctx := context.Background()
	hb := 60 * time.Second
	calls := &actorCalls{}
	// The drain outlasts the first heartbeat (a third of hb), so that a crash after a heartbeat comes while it
	// still drains.
	w, g := eventDrivenWorldStopping(t, hb, max(20*time.Second, hb/3), calls.wrap)
	names := []string{"patch-agent", "replica-b"}
	replicas := []*agent.Agent{w.Agent, w.NewReplica(names[1])}
	// Settle replica b too (it discovers the groups and reads their hooks on its first pass).
	for range 12 {
		stepBoth(t, w, calls, names, replicas, 5*time.Second)
	}
	instance, start := scaleInOne(t, w, g)
	key := model.ActionKey(g.Name, instance, testworld.HookName)
	var owners []string
	for range 12 * 30 { // 30 minutes
		stepBoth(t, w, calls, names, replicas, 5*time.Second)
		if rec, err := w.Store.GetHook(ctx, key); err == nil && (len(owners) == 0 || owners[len(owners)-1] != rec.Owner) {
			owners = append(owners, rec.Owner)
			require.False(t, rec.Adopted, "the record stays its message's")
		}
		if len(completionsOf(w, instance)) > 0 && w.Account.Clock().Since(start) > 15*time.Minute {
			break
		}
	}
	require.Equal(t, []string{"patch-agent"}, owners, "the owner that received the message keeps the action")
	requireKeptAlive(t, w, instance, start, hb, true)
	for _, call := range []string{"RecordLifecycleActionHeartbeat", "CompleteLifecycleAction", "DRAINING"} {
		require.Zero(t, calls.by("replica-b", call), "replica-b made no %s", call)
	}
	require.Equal(t, 1, calls.by("patch-agent", "CompleteLifecycleAction"))
	require.Empty(t, w.Checker.Finish())
}

// The take-over rule's other side (field cases C5, C6): the agent dies right after recording a terminating
// action, and before any incarnation comes back someone else completes the action (an operator's
// CompleteLifecycleAction with CONTINUE) and the instance terminates. The fresh incarnation (a new --owner-id)
// finds the record of an action no longer waiting: it does not take it over, heartbeat, drain or complete it;
// the message that comes back finds the instance terminated, records the action as done without a
// completion, and is deleted.
func TestC6RecordOfAnActionCompletedElsewhereIsNotTakenOverNorCompletedAgain(t *testing.T) {
	ctx := context.Background()
	w, instance, _, calls, _ := crashWhileWorking(t, 60*time.Second, crashRightAfterRecording)
	_, err := w.Account.AutoScaling().CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String("g"), LifecycleHookName: aws.String(testworld.HookName), InstanceId: aws.String(instance),
		LifecycleActionResult: aws.String(sim.ResultContinue)})
	require.NoError(t, err, "the operator's completion")
	restartAs(w, "incarnation-2")
	calls.setActor("second")
	_, err = w.RunEvents(ctx, 15*time.Minute, func() bool { return false })
	require.NoError(t, err)
	for _, call := range []string{"RecordLifecycleActionHeartbeat", "CompleteLifecycleAction", "DRAINING"} {
		require.Zero(t, calls.by("second", call), "no %s for an action no longer waiting", call)
	}
	rec, err := w.Store.GetHook(ctx, model.ActionKey("g", instance, testworld.HookName))
	require.NoError(t, err)
	require.False(t, rec.Adopted, "not taken over")
	require.Equal(t, state.HookCompleted, rec.State, "recorded done by its message")
	require.Empty(t, rec.Result, "recorded done without a completion of the agent's")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight, "the message is deleted")
}
