package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	ecstypes "github.com/aws/aws-sdk-go-v2/service/ecs/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/patch-agent/patch-agent/internal/agent"
	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/kubesim"
)

// lateEventBridge sends to the world's simulated EventBridge once the world is built (the notifier is the
// world's observer, so it exists first).
type lateEventBridge struct{ w **testworld.World }

func (l lateEventBridge) PutEvents(ctx context.Context, in *eventbridge.PutEventsInput, o ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	return (*l.w).Account.EventBridge().PutEvents(ctx, in, o...)
}

// watched is a world whose agent reports to a metrics registry, a notifier on the simulated EventBridge and
// a log that keeps warnings.
type watched struct {
	*testworld.World
	metrics  *metrics.Registry
	notifier *notify.Notifier
	logs     *observer.ObservedLogs
}

func buildWatched(t *testing.T, spec testworld.Spec) *watched {
	t.Helper()
	var w *testworld.World
	core, logs := observer.New(zapcore.WarnLevel)
	reg := metrics.NewRegistry(nil)
	n := notify.New(lateEventBridge{&w}, notify.Options{})
	spec.Log = zap.New(core)
	spec.Observer = notify.FanOut{Observers: []model.Observer{reg, n}}
	w = build(t, spec)
	return &watched{World: w, metrics: reg, notifier: n, logs: logs}
}

// rejected returns LifecycleMessagesRejected by reason.
func (w *watched) rejected() map[string]float64 {
	out := map[string]float64{}
	for _, s := range w.metrics.Collect() {
		if s.Name == metrics.LifecycleMessagesRejected {
			out[s.Reason] = s.Value
		}
	}
	return out
}

// rejectedNotifications returns the "Lifecycle Message Rejected" details the simulated EventBridge received.
func (w *watched) rejectedNotifications(t *testing.T) []notify.RejectedDetail {
	t.Helper()
	require.NoError(t, w.notifier.Flush(context.Background()))
	var out []notify.RejectedDetail
	for _, e := range w.Account.PublishedEvents() {
		if e.DetailType == notify.DetailTypeRejected {
			var d notify.RejectedDetail
			require.NoError(t, json.Unmarshal([]byte(e.Detail), &d))
			out = append(out, d)
		}
	}
	return out
}

// forged is a lifecycle message in the direct-hook shape (asg-hook-direct-terminating.json) naming group,
// hook and instance with a made-up token.
func forged(t *testing.T, group, hook, instance, token string) string {
	return fixture(t, "asg-hook-direct-terminating.json", "ecs-prod-cluster-asg", group, "patch-agent-drain", hook,
		"i-0a1b2c3d4e5f60718", instance, "5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13", token)
}

// requireNothingDrained asserts that the agent drained nothing: no UpdateContainerInstancesState call, every
// container instance of the groups ACTIVE, nothing completed or heartbeated.
func requireNothingDrained(t *testing.T, w *watched, groups ...string) {
	t.Helper()
	require.Zero(t, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "no container instance state changed")
	for _, g := range groups {
		for _, i := range w.Account.Group(g).Instances {
			require.Equal(t, "InService", i.LifecycleState, i.ID)
			require.Equal(t, "ACTIVE", i.ContainerInstanceStatus, i.ID)
		}
	}
	require.Empty(t, w.Account.LifecycleCompletions())
	require.Empty(t, w.Account.Heartbeats())
}

// Field case C19 (../shared/CASES.md): forged lifecycle messages drain nothing, are deleted as ignored, and
// name their reason in one warning, the LifecycleMessagesRejected metric and a notification.
func TestC19ForgedLifecycleMessagesDrainNothingAndAreRejectedWithTheirReason(t *testing.T) {
	managed := testworld.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 3, Max: 4, Desired: 3}
	other := testworld.GroupSetup{Name: "u", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 2, Desired: 1, Unmanaged: true}
	for _, tc := range []struct {
		name string
		// messages builds the forged messages from the world.
		messages func(t *testing.T, w *watched) []string
		reason   string
		notified bool
	}{
		{"for every InService instance of a managed group: three messages would have taken it to zero",
			func(t *testing.T, w *watched) []string {
				var out []string
				for i, inst := range w.Account.Group("g").Instances {
					out = append(out, forged(t, "g", testworld.HookName, inst.ID, "forged-token-"+string(rune('a'+i))))
				}
				return out
			}, model.RejectLifecycleState, true},
		{"for an instance of an unmanaged group in the same ECS cluster, naming the managed group",
			func(t *testing.T, w *watched) []string {
				return []string{forged(t, "g", testworld.HookName, w.Account.Group("u").Instances[0].ID, "forged-token")}
			}, model.RejectInstanceNotInGroup, true},
		{"for an instance of an unmanaged group in the same ECS cluster, naming the unmanaged group",
			func(t *testing.T, w *watched) []string {
				return []string{forged(t, "u", testworld.HookName, w.Account.Group("u").Instances[0].ID, "forged-token")}
			}, model.RejectGroupNotManaged, false},
		{"for a nonexistent instance", func(t *testing.T, w *watched) []string {
			return []string{forged(t, "g", testworld.HookName, "i-0fffffffffffffff0", "forged-token")}
		}, model.RejectInstanceNotFound, true},
		{"naming a hook the group lacks", func(t *testing.T, w *watched) []string {
			return []string{forged(t, "g", "not-a-hook-of-g", w.Account.Group("g").Instances[0].ID, "forged-token")}
		}, model.RejectUnknownHook, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := testworld.Spec{Groups: []testworld.GroupSetup{managed, other}, Services: map[string]int{"web": 6}}
			w := buildWatched(t, spec)
			settle(t, w.World, 10*time.Second)
			w.Account.ResetCalls()
			ignored := w.Agent.Consumer.Stats.Ignored.Load()
			msgs := tc.messages(t, w)
			for _, m := range msgs {
				w.Account.SendMessage(w.QueueURL, m)
			}
			settle(t, w.World, 5*time.Minute)

			requireNothingDrained(t, w, "g", "u")
			visible, inFlight := w.Account.QueueDepth(w.QueueURL)
			require.Zero(t, visible+inFlight, "deleted, never left to loop")
			require.Equal(t, ignored+int64(len(msgs)), w.Agent.Consumer.Stats.Ignored.Load(), "deleted as ignored")
			require.Zero(t, w.Agent.Consumer.Stats.Failed.Load())
			require.Equal(t, map[string]float64{tc.reason: float64(len(msgs))}, w.rejected())
			notes := w.rejectedNotifications(t)
			if !tc.notified {
				require.Empty(t, notes, "messages of unmanaged groups are routine on a shared queue (C3)")
				require.Zero(t, w.logs.Len(), "C3: logged at info, not warned")
				return
			}
			require.Len(t, notes, len(msgs))
			for _, n := range notes {
				require.Equal(t, tc.reason, n.Reason)
				require.Equal(t, notify.RejectedSchemaVersion, n.SchemaVersion)
				require.NotEmpty(t, n.Detail)
			}
			warnings := w.logs.FilterMessageSnippet("not confirmed by Auto Scaling").All()
			require.Len(t, warnings, len(msgs), "one warning per message")
			require.Equal(t, len(msgs), w.logs.Len(), "and no other warning")
			for _, l := range warnings {
				require.True(t, strings.HasPrefix(l.ContextMap()["reason"].(string), tc.reason+": "), l.ContextMap())
			}
		})
	}
}

// Field case C19, EKS: a forged message for a Ready node of a managed node group cordons and evicts nothing.
func TestC19ForgedLifecycleMessageForAnEKSNodeCordonsNothing(t *testing.T) {
	g := testworld.GroupSetup{Name: "nodes", Platform: model.PlatformEKS, Cluster: "e1", Parameter: providers.ParameterAuto, Min: 2, Max: 3, Desired: 2}
	w := buildWatched(t, testworld.Spec{Groups: []testworld.GroupSetup{g}, KubeWorkload: kubesim.KubeWorkload{Replicas: 4}})
	ctx := context.Background()
	settle(t, w.World, 10*time.Second)
	before, err := w.Kube.Observe(ctx)
	require.NoError(t, err)
	require.Len(t, before, 2)
	for i, inst := range w.Account.Group(g.Name).Instances {
		w.Account.SendMessage(w.QueueURL, forged(t, g.Name, testworld.HookName, inst.ID, "forged-"+string(rune('a'+i))))
	}
	settle(t, w.World, 5*time.Minute)

	after, err := w.Kube.Observe(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "no node cordoned, no pod evicted")
	for _, n := range after {
		require.False(t, n.Cordoned, n.Name)
	}
	ready, err := w.Kube.ReadyPods(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, ready)
	require.Empty(t, w.Account.LifecycleCompletions())
	require.Equal(t, map[string]float64{model.RejectLifecycleState: 2}, w.rejected())
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Zero(t, visible+inFlight)
}

// Field case C19, positive control: the same message shape for an instance really in Terminating:Wait, with
// its real token, is confirmed, drained and completed with CONTINUE.
func TestC19LifecycleMessageForAnInstanceReallyInTerminatingWaitIsDrainedAndContinued(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 3}
	w := buildWatched(t, oneGroup(&g))
	settle(t, w.World, 10*time.Second)
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 2))
	w.Checker.Baseline[g.Name] = 2
	msgs := w.Account.QueueMessages(w.QueueURL)
	require.Len(t, msgs, 1)
	real, err := events.Parse([]byte(msgs[0]))
	require.NoError(t, err)
	inst, _ := w.Account.Instance(real.Lifecycle.InstanceID)
	require.Equal(t, "Terminating:Wait", inst.LifecycleState)
	w.Account.SendMessage(w.QueueURL, forged(t, g.Name, real.Lifecycle.HookName, real.Lifecycle.InstanceID, real.Lifecycle.Token))

	done, err := w.RunUntil(context.Background(), tick, time.Hour, func() bool { return len(acceptedCompletions(w.World)) == 1 })
	require.NoError(t, err)
	require.True(t, done)
	settle(t, w.World, time.Minute)
	cs := acceptedCompletions(w.World)[real.Lifecycle.Token]
	require.Len(t, cs, 1, "completed once")
	require.Equal(t, sim.ResultContinue, cs[0].Result)
	require.True(t, cs[0].Drained, "drained before CONTINUE")
	require.Empty(t, w.rejected(), "nothing rejected")
	require.Empty(t, w.Checker.Finish())
	h, err := w.Store.GetHook(context.Background(), model.ActionKey(g.Name, real.Lifecycle.InstanceID, real.Lifecycle.HookName))
	require.NoError(t, err)
	require.True(t, h.Confirmed, "the confirmation is recorded once for the action")
	require.False(t, h.Adopted, "its message drove it, not the reconcile loop's safety net")
	require.True(t, h.AgentDrained)
	// The two copies may be received together, before either wrote the record, and a copy handed back while
	// the other's first look is still writing the record is confirmed once more (seen under load): a few
	// confirmations at most, never one per look (the drain takes more than 10 looks).
	require.LessOrEqual(t, w.Account.Calls()["autoscaling:DescribeAutoScalingInstances"], 3,
		"confirmed once per copy that arrived before the record, not on every look")
}

// flakyDescribe fails DescribeAutoScalingInstances while failing is set.
type flakyDescribe struct {
	awsapi.AutoScaling
	failing bool
}

func (f *flakyDescribe) DescribeAutoScalingInstances(ctx context.Context, in *autoscaling.DescribeAutoScalingInstancesInput, o ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error) {
	if f.failing {
		return nil, &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
	}
	return f.AutoScaling.DescribeAutoScalingInstances(ctx, in, o...)
}

// Field case C19: a confirmation Auto Scaling cannot give holds the message and drains nothing; once Auto
// Scaling answers, the real action is drained and completed.
func TestC19UnconfirmableLifecycleActionIsHeldNotDrainedNotDeleted(t *testing.T) {
	g := testworld.GroupSetup{Name: "g", Min: 1, Max: 3, Desired: 2}
	spec := oneGroup(&g)
	flaky := &flakyDescribe{failing: true}
	spec.Wrap = func(c agent.Clients) agent.Clients {
		flaky.AutoScaling = c.AutoScaling
		c.AutoScaling = flaky
		return c
	}
	w := build(t, spec)
	settle(t, w, 10*time.Second)
	w.Account.ResetCalls()
	require.NoError(t, w.Account.SetDesiredCapacity(g.Name, 1))
	w.Checker.Baseline[g.Name] = 1
	settle(t, w, 2*time.Minute)
	require.Zero(t, w.Account.Calls()["ecs:UpdateContainerInstancesState"], "nothing drained unconfirmed")
	visible, inFlight := w.Account.QueueDepth(w.QueueURL)
	require.Equal(t, 1, visible+inFlight, "the message is kept")
	require.Empty(t, w.Account.LifecycleCompletions())

	flaky.failing = false
	done, err := w.RunUntil(context.Background(), tick, time.Hour, func() bool { return len(acceptedCompletions(w)) == 1 })
	require.NoError(t, err)
	require.True(t, done, "confirmed once Auto Scaling answered, then drained and completed")
	for _, cs := range acceptedCompletions(w) {
		require.True(t, cs[0].Drained)
	}
}

// Field case C19, recovery: an instance the agent drained for a lifecycle action and that is InService again
// with no action waiting goes back to ACTIVE with a warning; the old instance a rollout's refresh terminates
// (drained under its terminating action, a stale mark of the same instance beside it) stays DRAINING until it
// is gone.
// The marks here are written beside the agent, as another replica's would be: the agent sees them within a
// lease TTL (2 minutes) of its last listing (lifecycleaction.Hooks drainMarks).
func TestC19InstanceLeftDrainingWhileInServiceIsPutBackActiveUnlessARolloutReplacesIt(t *testing.T) {
	ctx := context.Background()
	drainDirectly := func(t *testing.T, w *testworld.World, g, id string) {
		t.Helper()
		inst, _ := w.Account.Instance(id)
		_, err := w.Account.ECS().UpdateContainerInstancesState(ctx, &ecs.UpdateContainerInstancesStateInput{Cluster: &[]string{"c1"}[0],
			ContainerInstances: []string{inst.ContainerInstanceARN}, Status: ecstypes.ContainerInstanceStatusDraining})
		require.NoError(t, err)
		require.NoError(t, w.Store.PutDrainMark(ctx, state.DrainMark{InstanceID: id, Group: g, Platform: model.PlatformECS,
			Cluster: "c1", Token: "timed-out-token", At: time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)}))
	}

	t.Run("InService, no action waiting, no rollout: back to ACTIVE with a warning", func(t *testing.T) {
		g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
		w := buildWatched(t, oneGroup(&g))
		settle(t, w.World, 10*time.Second)
		id := w.Account.Group(g.Name).Instances[0].ID
		drainDirectly(t, w.World, g.Name, id)
		settle(t, w.World, 2*time.Minute+30*time.Second)
		inst, _ := w.Account.Instance(id)
		require.Equal(t, "ACTIVE", inst.ContainerInstanceStatus)
		require.Len(t, w.logs.FilterMessageSnippet("put back in service").All(), 1, "one warning")
		marks, err := w.Store.ListDrainMarks(ctx)
		require.NoError(t, err)
		require.Empty(t, marks, "the mark is gone with the drain")
	})

	t.Run("the old instance a rollout's refresh terminates stays DRAINING", func(t *testing.T) {
		g := testworld.GroupSetup{Name: "g", Min: 2, Max: 4, Desired: 2}
		spec := oneGroup(&g)
		spec.Sim.TaskStopStageDelay = 60 * time.Second // a drain that takes a few minutes
		w := buildWatched(t, spec)
		w.PublishAMI(g.Parameter, testworld.ImageB)
		var old string
		done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
			for _, i := range w.Account.Group(g.Name).Instances {
				if i.ImageID == testworld.ImageA && i.LifecycleState == "Terminating:Wait" && i.ContainerInstanceStatus == "DRAINING" {
					old = i.ID
				}
			}
			return old != ""
		})
		require.NoError(t, err)
		require.True(t, done, "an old instance drains under its terminating action: %+v", w.Rollout(ctx, g.Name))
		require.NoError(t, w.Store.PutDrainMark(ctx, state.DrainMark{InstanceID: old, Group: g.Name, Platform: model.PlatformECS,
			Cluster: "c1", Token: "timed-out-token", At: time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)}))
		gone, err := w.RunUntil(ctx, tick, 3*time.Hour, func() bool {
			inst, _ := w.Account.Instance(old)
			if strings.HasPrefix(inst.LifecycleState, "Terminating") {
				require.Equal(t, "DRAINING", inst.ContainerInstanceStatus, "never put back in service while the rollout replaces it")
			}
			return inst.LifecycleState == "Terminated"
		})
		require.NoError(t, err)
		require.True(t, gone, "the old instance is terminated")
		require.Empty(t, w.logs.FilterMessageSnippet("put back in service").All())
		settle(t, w.World, 2*time.Minute)
		marks, err := w.Store.ListDrainMarks(ctx)
		require.NoError(t, err)
		require.Empty(t, marks, "the mark goes with the instance")
	})
}
