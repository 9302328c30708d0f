package agent_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// lookOrder records the order in which a pass's looks at targets end.
type lookOrder struct {
	model.NopObserver
	mu    sync.Mutex
	order []string
}

func (o *lookOrder) TargetObserved(t model.Target, _ model.GroupView, _ state.Rollout, _ *model.ResolvedAMI) {
	o.mu.Lock()
	o.order = append(o.order, t.Group)
	o.mu.Unlock()
}

func (o *lookOrder) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := o.order
	o.order = nil
	return out
}

// TestATargetInFlightWhenThePassBudgetEndsStopsAtItsNextCallAndGoesFirstNextPass: a target handed out just
// before the 8 s budget ends must not hold the pass open for its whole step, its calls queued on the EC2
// mutating limit. One worker, three groups a, b, c whose AMI changed; every CreateLaunchTemplateVersion takes 5
// s of the clock that measures the budget. a is the worker's first target: its step is never cut. b is handed
// out at 5 s; its version is created at 10 s, past the budget, so its next call (StartInstanceRefresh, the
// refresh that launches the version) is not sent: b stays Preparing and the pass ends there, without a failed
// step's backoff; c is left out. The next pass begins with b (its step stopped halfway) before c, reuses the
// version b created (no second CreateLaunchTemplateVersion) and starts its refresh on it.
func TestATargetInFlightWhenThePassBudgetEndsStopsAtItsNextCallAndGoesFirstNextPass(t *testing.T) {
	var groups []testworld.GroupSetup
	for _, n := range []string{"a", "b", "c"} {
		groups = append(groups, testworld.GroupSetup{Name: n, Cluster: "c-" + n, Parameter: "/golden/fleet", Min: 1, Max: 2, Desired: 1})
	}
	faults := sim.NewFaults(1, nil)
	faults.Pause(true) // no injected faults: the wire's limiter and the counts
	obs := &lookOrder{}
	w := build(t, testworld.Spec{Groups: groups, Faults: faults, Observer: obs, Workers: 1})
	settle(t, w, 30*time.Second)
	// Tokens are always there: only the pass budget can stop a call.
	limiter := awsapi.NewLimiter(awsapi.RateLimits{awsapi.RateEC2Mutating: {Rate: 1000, Burst: 1000}, awsapi.RateEC2: {Rate: 1000, Burst: 1000},
		awsapi.RateAutoScaling: {Rate: 1000, Burst: 1000}, awsapi.RateECS: {Rate: 1000, Burst: 1000}, awsapi.RateSSM: {Rate: 1000, Burst: 1000}})
	faults.SetWire(sim.Wire{Client: limiter, Trace: func(c sim.WireCall) {
		if c.Op == "ec2:CreateLaunchTemplateVersion" && c.Err == nil {
			w.Account.Advance(5 * time.Second)
		}
	}})
	ctx := context.Background()
	w.RegisterAMI(testworld.ImageB)
	w.Account.PutParameter("/golden/fleet", testworld.ImageB) // no message: the pass's poll finds it
	w.Account.Advance(11 * time.Minute)                       // the parameter poll (10 min) is due
	_ = obs.take()
	const start, create = "autoscaling:StartInstanceRefresh", "ec2:CreateLaunchTemplateVersion"

	require.NoError(t, w.Agent.Reconcile(ctx))
	st := faults.Stats()
	require.Equal(t, []string{"a"}, obs.take(), "a looked at to its end; b cut in flight; c left out")
	require.Equal(t, 2, st.Successes[create], "a's and b's versions created")
	require.Equal(t, 1, st.Successes[start], "a's refresh started; b's StartInstanceRefresh, due after the budget, was not sent")
	b := w.Rollout(ctx, "b")
	require.Equal(t, state.PhasePreparing, b.Phase, "b stopped halfway through preparing: %+v", b)
	require.Equal(t, testworld.ImageB, w.Rollout(ctx, "a").TargetImageID)
	require.NotEqual(t, testworld.ImageB, w.Rollout(ctx, "c").TargetImageID, "c was not looked at")

	require.NoError(t, w.Agent.Reconcile(ctx))
	st = faults.Stats()
	order := obs.take()
	require.NotEmpty(t, order)
	require.Equal(t, "b", order[0], "the next pass begins with the target cut in flight: %v", order)
	require.Contains(t, order, "c", "and reaches the one left out: %v", order)
	require.Equal(t, 3, st.Successes[create], "b's version reused, c's created: one version per group")
	require.Equal(t, 3, st.Successes[start], "one refresh per group")
	b = w.Rollout(ctx, "b")
	require.NotEqual(t, state.PhasePreparing, b.Phase, "b's refresh now launches its new version: %+v", b)
	requireRefreshOnNewVersion(t, w, "b")
	require.Empty(t, w.Checker.Check())
}

// TestAReactionsTargetsInFlightAreNotCutByThePassBudget: the same three groups, but the AMI change arrives as
// a golden-AMI Parameter Store Change, a reaction whose calls take the limiter's priority lane
// (awsapi.WithUrgent). Its pass still stops handing out targets after the budget (c is left for the loop,
// woken), but a target already in flight is not stopped at its next call: b's refresh of the version created
// past the budget starts in the same handling.
func TestAReactionsTargetsInFlightAreNotCutByThePassBudget(t *testing.T) {
	var groups []testworld.GroupSetup
	for _, n := range []string{"a", "b", "c"} {
		groups = append(groups, testworld.GroupSetup{Name: n, Cluster: "c-" + n, Parameter: "/golden/fleet", Min: 1, Max: 2, Desired: 1})
	}
	faults := sim.NewFaults(1, nil)
	faults.Pause(true)
	w := build(t, testworld.Spec{Groups: groups, Faults: faults, Workers: 1})
	settle(t, w, 30*time.Second)
	limiter := awsapi.NewLimiter(awsapi.RateLimits{awsapi.RateEC2Mutating: {Rate: 1000, Burst: 1000}, awsapi.RateEC2: {Rate: 1000, Burst: 1000},
		awsapi.RateAutoScaling: {Rate: 1000, Burst: 1000}, awsapi.RateECS: {Rate: 1000, Burst: 1000}, awsapi.RateSSM: {Rate: 1000, Burst: 1000}})
	faults.SetWire(sim.Wire{Client: limiter, Trace: func(c sim.WireCall) {
		if c.Op == "ec2:CreateLaunchTemplateVersion" && c.Err == nil {
			w.Account.Advance(5 * time.Second)
		}
	}})
	ctx := context.Background()
	w.PublishAMI("/golden/fleet", testworld.ImageB)
	_, err := w.Agent.Consumer.PollOnce(ctx, 0)
	require.NoError(t, err)
	st := faults.Stats()
	require.Equal(t, 2, st.Successes["ec2:CreateLaunchTemplateVersion"], "a's and b's versions; c left for the loop")
	require.Equal(t, 2, st.Successes["autoscaling:StartInstanceRefresh"], "b, in flight past the budget, started its refresh")
	requireRefreshOnNewVersion(t, w, "b")
	require.Empty(t, w.Checker.Check())
}
