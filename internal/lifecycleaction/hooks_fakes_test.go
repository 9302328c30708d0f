package lifecycleaction

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

var t0 = time.Date(2026, 3, 2, 10, 0, 0, 0, time.UTC)

const (
	drainHook  = "patch-agent-drain"
	launchHook = "patch-agent-launch"
	agentQueue = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent"
)

// fakeAutoScaling answers the lifecycle action calls of Hooks for the instances and hooks it holds and records
// the completions and heartbeats; every other Auto Scaling call panics (the embedded nil interface), so a test
// fails if Hooks makes one. An action is active while its instance is in a wait state and not completed.
type fakeAutoScaling struct {
	awsapi.AutoScaling
	instances  map[string]astypes.AutoScalingInstanceDetails
	hooks      map[string][]astypes.LifecycleHook // group -> hooks
	completes  []*autoscaling.CompleteLifecycleActionInput
	heartbeats []*autoscaling.RecordLifecycleActionHeartbeatInput
}

func newFakeAutoScaling() *fakeAutoScaling {
	return &fakeAutoScaling{instances: map[string]astypes.AutoScalingInstanceDetails{}, hooks: map[string][]astypes.LifecycleHook{}}
}

// place puts instance id in group in lifecycle state st, healthy.
func (f *fakeAutoScaling) place(id, group string, st astypes.LifecycleState) {
	f.instances[id] = astypes.AutoScalingInstanceDetails{InstanceId: aws.String(id), AutoScalingGroupName: aws.String(group),
		LifecycleState: aws.String(string(st)), HealthStatus: aws.String("HEALTHY")}
}

// hook adds a lifecycle hook to group; target "" notifies nothing (EventBridge).
func (f *fakeAutoScaling) hook(group, name, transition string, heartbeat int32, target string) {
	h := astypes.LifecycleHook{AutoScalingGroupName: aws.String(group), LifecycleHookName: aws.String(name),
		LifecycleTransition: aws.String(transition), HeartbeatTimeout: aws.Int32(heartbeat)}
	if target != "" {
		h.NotificationTargetARN = aws.String(target)
	}
	f.hooks[group] = append(f.hooks[group], h)
}

func (f *fakeAutoScaling) DescribeAutoScalingInstances(_ context.Context, in *autoscaling.DescribeAutoScalingInstancesInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error) {
	out := &autoscaling.DescribeAutoScalingInstancesOutput{}
	for _, id := range in.InstanceIds {
		if i, ok := f.instances[id]; ok {
			out.AutoScalingInstances = append(out.AutoScalingInstances, i)
		}
	}
	return out, nil
}

func (f *fakeAutoScaling) DescribeLifecycleHooks(_ context.Context, in *autoscaling.DescribeLifecycleHooksInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: f.hooks[aws.ToString(in.AutoScalingGroupName)]}, nil
}

var errNoActiveAction = &smithy.GenericAPIError{Code: "ValidationError", Message: "No active Lifecycle Action found with instance ID"}

// waiting reports whether an action of the instance and hook waits: the instance waits in its group, on a hook
// the group has, and no completion of it was accepted.
func (f *fakeAutoScaling) waiting(group, hook, id string) bool {
	i, ok := f.instances[id]
	if !ok || aws.ToString(i.AutoScalingGroupName) != group || !slices.ContainsFunc(f.hooks[group], func(h astypes.LifecycleHook) bool {
		return aws.ToString(h.LifecycleHookName) == hook
	}) {
		return false
	}
	switch astypes.LifecycleState(aws.ToString(i.LifecycleState)) {
	case astypes.LifecycleStateTerminatingWait, astypes.LifecycleStatePendingWait, astypes.LifecycleStateWarmedPendingWait,
		astypes.LifecycleStateWarmedTerminatingWait, astypes.LifecycleStateReplacingRootVolumeWait:
	default:
		return false
	}
	return !slices.ContainsFunc(f.completes, func(c *autoscaling.CompleteLifecycleActionInput) bool {
		return aws.ToString(c.InstanceId) == id && aws.ToString(c.LifecycleHookName) == hook
	})
}

func (f *fakeAutoScaling) CompleteLifecycleAction(_ context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	if !f.waiting(aws.ToString(in.AutoScalingGroupName), aws.ToString(in.LifecycleHookName), aws.ToString(in.InstanceId)) {
		return nil, errNoActiveAction
	}
	f.completes = append(f.completes, in)
	return &autoscaling.CompleteLifecycleActionOutput{}, nil
}

func (f *fakeAutoScaling) RecordLifecycleActionHeartbeat(_ context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	if !f.waiting(aws.ToString(in.AutoScalingGroupName), aws.ToString(in.LifecycleHookName), aws.ToString(in.InstanceId)) {
		return nil, errNoActiveAction
	}
	f.heartbeats = append(f.heartbeats, in)
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, nil
}

// results returns the LifecycleActionResult of every accepted completion of instance id.
func (f *fakeAutoScaling) results(id string) []string {
	var out []string
	for _, c := range f.completes {
		if aws.ToString(c.InstanceId) == id {
			out = append(out, aws.ToString(c.LifecycleActionResult))
		}
	}
	return out
}

// fakeEC2 describes the instances it holds (running unless set otherwise); every other EC2 call panics.
type fakeEC2 struct {
	awsapi.EC2
	instances map[string]ec2types.Instance
	describes int // DescribeInstances calls
}

func (f *fakeEC2) run(id, image string) {
	if f.instances == nil {
		f.instances = map[string]ec2types.Instance{}
	}
	f.instances[id] = ec2types.Instance{InstanceId: aws.String(id), ImageId: aws.String(image),
		State: &ec2types.InstanceState{Name: ec2types.InstanceStateNameRunning}}
}

func (f *fakeEC2) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	f.describes++
	out := &ec2.DescribeInstancesOutput{}
	for _, id := range in.InstanceIds {
		if i, ok := f.instances[id]; ok {
			out.Reservations = append(out.Reservations, ec2types.Reservation{Instances: []ec2types.Instance{i}})
		}
	}
	return out, nil
}

// fakePlatform drains an instance once StartDrain was called for it and drained[id] is set; it records every
// StartDrain and Undrain, and Observe reports the instances in healthy as healthy members.
type fakePlatform struct {
	started, undrained []string
	statuses           int // DrainStatus calls
	drained            map[string]bool
	healthy            map[string]bool
}

func (p *fakePlatform) Observe(context.Context, string) (map[string]model.NodeState, error) {
	out := map[string]model.NodeState{}
	for id, ok := range p.healthy {
		out[id] = model.NodeState{Registered: true, Healthy: ok}
	}
	return out, nil
}

func (p *fakePlatform) StartDrain(_ context.Context, _, id string) error {
	p.started = append(p.started, id)
	return nil
}

func (p *fakePlatform) DrainStatus(_ context.Context, _, id string) (model.DrainProgress, error) {
	p.statuses++
	started := slices.Contains(p.started, id)
	return model.DrainProgress{Started: started, Drained: started && p.drained[id], Detail: "tasks still running"}, nil
}

func (p *fakePlatform) Undrain(_ context.Context, _, id string) error {
	p.undrained = append(p.undrained, id)
	return nil
}

// spyObserver records completions, rejections and alerts.
type spyObserver struct {
	completed []state.Hook
	rejected  []model.Rejection
	alerts    []model.Alert
}

func (*spyObserver) RolloutTransition(state.Rollout, state.Rollout, string) {}

func (*spyObserver) TargetObserved(model.Target, model.GroupView, state.Rollout, *model.ResolvedAMI) {
}

func (s *spyObserver) LifecycleActionCompleted(h state.Hook, _ time.Duration) {
	s.completed = append(s.completed, h)
}

func (s *spyObserver) LifecycleMessageRejected(r model.Rejection) { s.rejected = append(s.rejected, r) }

func (s *spyObserver) Alert(a model.Alert) { s.alerts = append(s.alerts, a) }

// rig is Hooks over the fakes: group prod (ECS cluster c1) with the agent's terminating hook patch-agent-drain
// and launching hook patch-agent-launch (300 s heartbeat timeout, no notification target), a 10 minute drain
// timeout.
type rig struct {
	hooks    *Hooks
	as       *fakeAutoScaling
	ec2      *fakeEC2
	platform *fakePlatform
	store    *state.Memory
	clock    *clocktesting.FakeClock
	spy      *spyObserver
	target   model.Target
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{as: newFakeAutoScaling(), ec2: &fakeEC2{}, platform: &fakePlatform{drained: map[string]bool{}, healthy: map[string]bool{}},
		store: state.NewMemory(), clock: clocktesting.NewFakeClock(t0), spy: &spyObserver{},
		target: model.Target{Group: "prod", Platform: model.PlatformECS, Cluster: "c1", Parameter: "/golden/ecs"}}
	r.as.hook("prod", drainHook, events.TransitionTerminating, 300, "")
	r.as.hook("prod", launchHook, events.TransitionLaunching, 300, "")
	policy := model.DefaultPolicy()
	policy.DrainTimeout = 10 * time.Minute
	policy.HealthTimeout = 10 * time.Minute
	r.hooks = &Hooks{Owner: "me", Store: r.store, AutoScaling: r.as, EC2: r.ec2,
		Platforms: model.Platforms{model.PlatformECS: r.platform}, Clock: r.clock, Log: zap.NewNop(), Policy: policy,
		Observer: r.spy, QueueURL: agentQueue}
	return r
}

// restart replaces the rig's Hooks by the next incarnation's: the same store, account and settings, nothing
// remembered.
func (r *rig) restart() {
	old := r.hooks
	r.hooks = &Hooks{Owner: old.Owner, Store: r.store, AutoScaling: old.AutoScaling, EC2: old.EC2, Platforms: old.Platforms,
		Clock: old.Clock, Log: old.Log, Policy: old.Policy, Observer: old.Observer, QueueURL: old.QueueURL}
}

// terminating places instance id of prod in Terminating:Wait and returns its action's message on drainHook.
func (r *rig) terminating(id string) events.LifecycleAction {
	r.as.place(id, "prod", astypes.LifecycleStateTerminatingWait)
	r.ec2.run(id, "ami-old")
	return events.LifecycleAction{GroupName: "prod", HookName: drainHook, InstanceID: id, Token: "tok-" + id,
		Transition: events.TransitionTerminating}
}

// handle takes one look at a through its message and fails on an error.
func (r *rig) handle(t *testing.T, a events.LifecycleAction) HookOutcome {
	t.Helper()
	out, err := r.hooks.Handle(context.Background(), r.target, a)
	require.NoError(t, err)
	return out
}

// handleFor looks at a every step for d, advancing the clock, and fails on any outcome but HookInProgress.
func (r *rig) handleFor(t *testing.T, a events.LifecycleAction, d, step time.Duration) {
	t.Helper()
	for end := r.clock.Now().Add(d); r.clock.Now().Before(end); r.clock.Step(step) {
		require.Equal(t, HookInProgress, r.handle(t, a), "at %s", r.clock.Now().Sub(t0))
	}
}

// record returns the stored record of the action of instance id on hook.
func (r *rig) record(t *testing.T, id, hook string) state.Hook {
	t.Helper()
	rec, err := r.store.GetHook(context.Background(), model.ActionKey("prod", id, hook))
	require.NoError(t, err)
	return rec
}

// refreshing stores prod's rollout by the agent's instance refresh, Replacing.
func (r *rig) refreshing(t *testing.T) {
	t.Helper()
	_, err := r.store.PutRollout(context.Background(), state.Rollout{Group: "prod", Platform: model.PlatformECS, Phase: state.PhaseReplacing,
		Strategy: model.StrategyRefresh, TargetImageID: "ami-new", PreviousImageID: "ami-old",
		Current: &state.Replacement{Step: state.StepInstanceRefresh, StepStartedAt: t0.Add(-time.Minute)},
		Refresh: &state.RefreshProgress{ID: "ir-1", LaunchTemplateID: "lt-1", Version: "2", PreviousVersion: "1", MinHealthyPercentage: 100,
			MaxHealthyPercentage: 134, BatchSize: 3, Desired: 3, TerminatingHook: drainHook, LaunchingHook: launchHook, StartedAt: t0.Add(-time.Minute)}})
	require.NoError(t, err)
}
