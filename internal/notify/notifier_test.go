package notify_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

const (
	group    = "web-asg"
	imageA   = "ami-0a1a2a3a4a5a6a7a8"
	imageB   = "ami-0b1b2b3b4b5b6b7b8"
	platform = "ecs"
)

var t0 = time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)

// fakeEventBridge records PutEvents calls; fail, when set, answers every call.
type fakeEventBridge struct {
	mu      sync.Mutex
	entries []ebtypes.PutEventsRequestEntry
	calls   int
	fail    error
	// rejectDetailType, when set, fails the entries of that detail-type one by one.
	rejectDetailType string
}

var _ notify.PutEventsAPI = (*fakeEventBridge)(nil)

func (f *fakeEventBridge) PutEvents(_ context.Context, in *eventbridge.PutEventsInput, _ ...func(*eventbridge.Options)) (*eventbridge.PutEventsOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if len(in.Entries) > notify.MaxEntriesPerCall {
		return nil, errors.New("ValidationException: too many entries")
	}
	if f.fail != nil {
		return nil, f.fail
	}
	out := &eventbridge.PutEventsOutput{}
	for _, e := range in.Entries {
		if aws.ToString(e.DetailType) == f.rejectDetailType {
			out.FailedEntryCount++
			out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{ErrorCode: aws.String("InternalFailure"), ErrorMessage: aws.String("try again")})
			continue
		}
		f.entries = append(f.entries, e)
		out.Entries = append(out.Entries, ebtypes.PutEventsResultEntry{EventId: aws.String("id")})
	}
	return out, nil
}

// rolloutEvents decodes the "Rollout State Change" details sent so far.
func (f *fakeEventBridge) rolloutEvents(t *testing.T) []notify.RolloutDetail {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []notify.RolloutDetail
	for _, e := range f.entries {
		if aws.ToString(e.DetailType) != notify.DetailTypeRollout {
			continue
		}
		var d notify.RolloutDetail
		require.NoError(t, json.Unmarshal([]byte(aws.ToString(e.Detail)), &d))
		out = append(out, d)
	}
	return out
}

func kinds(ds []notify.RolloutDetail) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Event)
	}
	return out
}

func rec(phase state.Phase, reason string) state.Rollout {
	return state.Rollout{Group: group, Platform: platform, Cluster: "c1", Phase: phase, Reason: reason,
		TargetImageID: imageB, PreviousImageID: imageA, DetectedAt: t0, Instances: 3, OnTarget: 1, UpdatedAt: t0.Add(time.Minute)}
}

func TestWhichTransitionsAreAnnounced(t *testing.T) {
	type step struct {
		phase  state.Phase
		reason string
	}
	for _, tc := range []struct {
		name  string
		from  step
		steps []step
		want  []string
	}{
		{"detection starts the rollout", step{state.PhaseCompleted, ""},
			[]step{{state.PhaseDetected, ""}, {state.PhasePreparing, ""}, {state.PhaseReplacing, ""}}, []string{"started"}},
		{"a manual rollback (Detected written by the operator) starts when the agent leaves Detected", step{state.PhaseDetected, ""},
			[]step{{state.PhasePreparing, ""}}, []string{"started"}},
		{"a gate is announced once per kind, not per wording", step{state.PhaseCompleted, ""},
			[]step{{state.PhaseDetected, ""}, {state.PhaseWaiting, "soak: AMI ami-0b is 1h0m0s old, minimum 48h0m0s"},
				{state.PhaseWaiting, "soak: AMI ami-0b is 1h1m0s old, minimum 48h0m0s"},
				{state.PhaseWaiting, "approval: waiting for `patch-agent approve web-asg` (AMI ami-0b)"}},
			[]string{"started", "waiting", "waiting"}},
		{"a pause mid-replacement is a gate; its end is no event", step{state.PhaseReplacing, ""},
			[]step{{state.PhaseReplacing, "paused (global) by ops since 2026-11-30T02:10:00Z: incident; next step: drain i-1"},
				{state.PhaseReplacing, ""}, {state.PhaseReplacing, "waiting for i-9 to settle (Pending)"}},
			[]string{"waiting"}},
		{"a failure with rollback", step{state.PhaseReplacing, ""},
			[]step{{state.PhaseRollingBack, "failed: replacement i-5 not healthy after 10m0s"},
				{state.PhaseRollingBack, "failed: replacement i-5 not healthy after 10m0s"},
				{state.PhaseRolledBack, "failed: replacement i-5 not healthy after 10m0s"}},
			[]string{"rolling-back", "rolled-back"}},
		{"a failure without rollback", step{state.PhaseReplacing, ""},
			[]step{{state.PhaseHalted, "failed: drain of i-1 did not finish within 30m0s"}, {state.PhaseHalted, "failed: drain of i-1 did not finish within 30m0s"}},
			[]string{"halted"}},
		{"completion", step{state.PhaseVerifying, ""}, []step{{state.PhaseCompleted, ""}, {state.PhaseCompleted, ""}}, []string{"completed"}},
		{"first sight of a group already current is no rollout", step{"", ""}, []step{{state.PhaseIdle, ""}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eb := &fakeEventBridge{}
			n := notify.New(eb, notify.Options{})
			prev := rec(tc.from.phase, tc.from.reason)
			for _, s := range tc.steps {
				next := rec(s.phase, s.reason)
				n.RolloutTransition(prev, next, "x")
				prev = next
			}
			require.NoError(t, n.Flush(context.Background()))
			require.Equal(t, tc.want, kinds(eb.rolloutEvents(t)))
		})
	}
}

func TestRolloutDetailCarriesTheRecord(t *testing.T) {
	eb := &fakeEventBridge{}
	n := notify.New(eb, notify.Options{Bus: "ops", AgentVersion: "v1.2.3-4-gabc1234"})
	prev := rec(state.PhaseReplacing, "")
	next := rec(state.PhaseHalted, "failed: drain of i-1 did not finish within 30m0s")
	n.RolloutTransition(prev, next, "halted")
	require.NoError(t, n.Flush(context.Background()))
	require.Len(t, eb.entries, 1)
	e := eb.entries[0]
	require.Equal(t, "patch-agent", aws.ToString(e.Source))
	require.Equal(t, "ops", aws.ToString(e.EventBusName))
	require.Equal(t, next.UpdatedAt, aws.ToTime(e.Time))
	var raw map[string]any
	require.NoError(t, json.Unmarshal([]byte(aws.ToString(e.Detail)), &raw))
	require.Equal(t, map[string]any{"schemaVersion": "1", "event": "halted", "group": group, "platform": platform, "cluster": "c1",
		"phase": "Halted", "previousPhase": "Replacing", "reason": next.Reason, "targetImageId": imageB, "previousImageId": imageA,
		"instances": 3.0, "onTarget": 1.0, "at": "2026-11-30T02:01:00Z", "rejectReason": "", "agentVersion": "v1.2.3-4-gabc1234"}, raw)
}

// TestC20AMIRejectedIsAnnouncedWithItsReason: a refusal of the AMI gate (field case C20) is one "ami-rejected"
// event whose rejectReason is the gate's reason and whose reason is the status reason; FanOut passes it on.
func TestC20AMIRejectedIsAnnouncedWithItsReason(t *testing.T) {
	eb := &fakeEventBridge{}
	n := notify.New(eb, notify.Options{})
	r := rec(state.PhaseWaiting, "AMI refused: ami-0b is arm64 but the group can launch m5.large (x86_64) (ArchitectureMismatch)")
	rej := model.AMIRejection{ImageID: imageB, Reason: providers.RejectArchitectureMismatch, Detail: "is arm64"}
	notify.FanOut{Observers: []model.Observer{model.NopObserver{}, n}}.AMIRejected(
		model.Target{Group: group, Platform: platform, Cluster: "c1"}, r, rej)
	require.NoError(t, n.Flush(context.Background()))
	require.Len(t, eb.entries, 1)
	var d notify.RolloutDetail
	require.NoError(t, json.Unmarshal([]byte(aws.ToString(eb.entries[0].Detail)), &d))
	require.Equal(t, notify.EventAMIRejected, d.Event)
	require.Equal(t, providers.RejectArchitectureMismatch, d.RejectReason)
	require.Equal(t, r.Reason, d.Reason)
	require.Equal(t, imageB, d.TargetImageID)
	require.Equal(t, "Waiting", d.Phase)
}

func TestLifecycleActionCompletedNamesTheGroupsPlatformAndCluster(t *testing.T) {
	eb := &fakeEventBridge{}
	n := notify.New(eb, notify.Options{AgentVersion: "v1.2.3"})
	n.TargetObserved(model.Target{Group: group, Platform: platform, Cluster: "c1"}, model.GroupView{}, state.Rollout{}, nil)
	n.LifecycleActionCompleted(state.Hook{Group: group, HookName: "drain", InstanceID: "i-1", Transition: events.TransitionTerminating,
		Result: "CONTINUE", CompletedAt: t0}, 95*time.Second)
	require.NoError(t, n.Flush(context.Background()))
	require.Len(t, eb.entries, 1)
	require.Equal(t, notify.DetailTypeLifecycle, aws.ToString(eb.entries[0].DetailType))
	var d notify.LifecycleDetail
	require.NoError(t, json.Unmarshal([]byte(aws.ToString(eb.entries[0].Detail)), &d))
	require.Equal(t, notify.LifecycleDetail{SchemaVersion: "1", Group: group, Platform: platform, Cluster: "c1", InstanceID: "i-1",
		LifecycleHookName: "drain", LifecycleTransition: events.TransitionTerminating, Result: "CONTINUE", DrainSeconds: 95, At: t0, AgentVersion: "v1.2.3"}, d)
}

func TestSendFailuresAreCountedNotReturnedToTheAgent(t *testing.T) {
	eb := &fakeEventBridge{rejectDetailType: notify.DetailTypeLifecycle}
	n := notify.New(eb, notify.Options{})
	n.RolloutTransition(rec(state.PhaseVerifying, ""), rec(state.PhaseCompleted, ""), "rollout completed")
	n.LifecycleActionCompleted(state.Hook{Group: group}, 0)
	require.ErrorContains(t, n.Flush(context.Background()), "rejected 1 of 2")
	sent, failed, dropped := n.Stats()
	require.Equal(t, [3]int64{1, 1, 0}, [3]int64{sent, failed, dropped})

	eb.fail = errors.New("AccessDeniedException")
	n.RolloutTransition(rec(state.PhaseVerifying, ""), rec(state.PhaseCompleted, ""), "rollout completed")
	require.ErrorContains(t, n.Flush(context.Background()), "AccessDeniedException")
	_, failed, _ = n.Stats()
	require.Equal(t, int64(2), failed)
}

func TestAFullBufferDropsInsteadOfBlockingTheAgent(t *testing.T) {
	eb := &fakeEventBridge{}
	n := notify.New(eb, notify.Options{Buffer: 2})
	for range 5 {
		n.LifecycleActionCompleted(state.Hook{Group: group}, 0)
	}
	_, _, dropped := n.Stats()
	require.Equal(t, int64(3), dropped)
	require.NoError(t, n.Flush(context.Background()))
	require.Len(t, eb.entries, 2)
}

func TestRunBatchesAndFlushesOnShutdown(t *testing.T) {
	eb := &fakeEventBridge{}
	n := notify.New(eb, notify.Options{})
	for range 25 { // queued before Run starts: sent in batches of at most 10
		n.LifecycleActionCompleted(state.Hook{Group: group}, 0)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	require.Eventually(t, func() bool { sent, _, _ := n.Stats(); return sent == 25 }, 5*time.Second, time.Millisecond)
	eb.mu.Lock()
	require.GreaterOrEqual(t, eb.calls, 3)
	eb.mu.Unlock()
	cancel()
	n.LifecycleActionCompleted(state.Hook{Group: group}, 0) // raced with shutdown: sent by Run's flush or by a Flush after it
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
	require.NoError(t, n.Flush(context.Background()))
	sent, failed, _ := n.Stats()
	require.Equal(t, int64(26), sent)
	require.Zero(t, failed)
}

type panicky struct{ model.NopObserver }

func (panicky) RolloutTransition(state.Rollout, state.Rollout, string) { panic("bug in an observer") }

func TestFanOutSurvivesAPanickingObserver(t *testing.T) {
	eb := &fakeEventBridge{}
	n := notify.New(eb, notify.Options{})
	f := notify.FanOut{Observers: []model.Observer{panicky{}, n}}
	require.NotPanics(t, func() {
		f.RolloutTransition(rec(state.PhaseVerifying, ""), rec(state.PhaseCompleted, ""), "rollout completed")
	})
	require.NoError(t, n.Flush(context.Background()))
	require.Equal(t, []string{"completed"}, kinds(eb.rolloutEvents(t)), "the observers after it still ran")
}
