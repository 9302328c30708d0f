package providers_test

import (
	"context"
	"errors"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// fakeActionsAPI answers the lifecycle action calls with err (when set) and records their inputs and whether
// each came in the limiter's priority lane. Other calls are not implemented (nil interfaces panic).
type fakeActionsAPI struct {
	awsapi.AutoScaling
	awsapi.EC2
	err       error
	completes []*autoscaling.CompleteLifecycleActionInput
	beats     []*autoscaling.RecordLifecycleActionHeartbeatInput
	urgent    []bool
	asg       []astypes.AutoScalingInstanceDetails
	asgIn     []*autoscaling.DescribeAutoScalingInstancesInput
	ec2       []ec2types.Reservation
	ec2In     []*ec2.DescribeInstancesInput
}

func (f *fakeActionsAPI) CompleteLifecycleAction(ctx context.Context, in *autoscaling.CompleteLifecycleActionInput, _ ...func(*autoscaling.Options)) (*autoscaling.CompleteLifecycleActionOutput, error) {
	f.completes, f.urgent = append(f.completes, in), append(f.urgent, awsapi.IsUrgent(ctx))
	return &autoscaling.CompleteLifecycleActionOutput{}, f.err
}

func (f *fakeActionsAPI) RecordLifecycleActionHeartbeat(ctx context.Context, in *autoscaling.RecordLifecycleActionHeartbeatInput, _ ...func(*autoscaling.Options)) (*autoscaling.RecordLifecycleActionHeartbeatOutput, error) {
	f.beats, f.urgent = append(f.beats, in), append(f.urgent, awsapi.IsUrgent(ctx))
	return &autoscaling.RecordLifecycleActionHeartbeatOutput{}, f.err
}

func (f *fakeActionsAPI) DescribeAutoScalingInstances(_ context.Context, in *autoscaling.DescribeAutoScalingInstancesInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error) {
	f.asgIn = append(f.asgIn, in)
	if f.err != nil {
		return nil, f.err
	}
	return &autoscaling.DescribeAutoScalingInstancesOutput{AutoScalingInstances: f.asg}, nil
}

func (f *fakeActionsAPI) DescribeInstances(_ context.Context, in *ec2.DescribeInstancesInput, _ ...func(*ec2.Options)) (*ec2.DescribeInstancesOutput, error) {
	f.ec2In = append(f.ec2In, in)
	if f.err != nil {
		return nil, f.err
	}
	return &ec2.DescribeInstancesOutput{Reservations: f.ec2}, nil
}

func actionsOver(f *fakeActionsAPI) providers.LifecycleActions {
	return providers.LifecycleActions{AutoScaling: f, EC2: f}
}

// forged is an action whose message carries a token: the calls name the action by instance and hook only.
var forged = events.LifecycleAction{GroupName: "web", HookName: "drain", InstanceID: "i-1", Token: "made-up-token",
	Transition: events.TransitionTerminating}

var noActiveAction = &smithy.GenericAPIError{Code: "ValidationError",
	Message: "No active Lifecycle Action found with instance ID i-1"}

func TestLifecycleActionsCompleteNamesTheActionByInstanceAndHookAndAnswersWhetherItWasActive(t *testing.T) {
	ctx := context.Background()
	f := &fakeActionsAPI{}
	active, err := actionsOver(f).Complete(ctx, forged, model.ResultContinue)
	require.NoError(t, err)
	require.True(t, active)
	require.Equal(t, &autoscaling.CompleteLifecycleActionInput{AutoScalingGroupName: aws.String("web"),
		LifecycleHookName: aws.String("drain"), InstanceId: aws.String("i-1"), LifecycleActionResult: aws.String("CONTINUE")},
		f.completes[0], "no LifecycleActionToken")
	require.Equal(t, []bool{false}, f.urgent, "the caller's lane")

	f.err = noActiveAction
	active, err = actionsOver(f).Complete(ctx, forged, model.ResultAbandon)
	require.NoError(t, err, "no active action is an answer, not an error")
	require.False(t, active)

	f.err = &smithy.GenericAPIError{Code: "Throttling", Message: "Rate exceeded"}
	active, err = actionsOver(f).Complete(ctx, forged, model.ResultAbandon)
	require.Same(t, f.err, err, "Auto Scaling's error, unwrapped")
	require.False(t, active)
}

func TestLifecycleActionsHeartbeatTakesThePriorityLaneWhenUrgent(t *testing.T) {
	ctx := context.Background()
	f := &fakeActionsAPI{}
	for _, urgent := range []bool{true, false} {
		active, err := actionsOver(f).Heartbeat(ctx, forged, urgent)
		require.NoError(t, err)
		require.True(t, active)
	}
	require.Equal(t, []bool{true, false}, f.urgent)
	for _, in := range f.beats {
		require.Equal(t, &autoscaling.RecordLifecycleActionHeartbeatInput{AutoScalingGroupName: aws.String("web"),
			LifecycleHookName: aws.String("drain"), InstanceId: aws.String("i-1")}, in, "no LifecycleActionToken")
	}

	f.err = noActiveAction
	active, err := actionsOver(f).Heartbeat(ctx, forged, true)
	require.NoError(t, err)
	require.False(t, active)

	f.err = errors.New("connection reset")
	_, err = actionsOver(f).Heartbeat(ctx, forged, true)
	require.Same(t, f.err, err)
}

func TestLifecycleActionsInstancesAreWhatAutoScalingDescribesByID(t *testing.T) {
	ctx := context.Background()
	f := &fakeActionsAPI{asg: []astypes.AutoScalingInstanceDetails{
		{InstanceId: aws.String("i-1"), AutoScalingGroupName: aws.String("web"), LifecycleState: aws.String("Terminating:Wait"), HealthStatus: aws.String("Unhealthy")},
		{InstanceId: aws.String("i-2"), AutoScalingGroupName: aws.String("api"), LifecycleState: aws.String("InService"), HealthStatus: aws.String("HEALTHY")},
	}}
	got, err := actionsOver(f).Instances(ctx, []string{"i-1", "i-2", "i-3"})
	require.NoError(t, err)
	require.Equal(t, map[string]providers.AutoScalingInstance{
		"i-1": {ID: "i-1", Group: "web", LifecycleState: "Terminating:Wait", HealthStatus: "Unhealthy"},
		"i-2": {ID: "i-2", Group: "api", LifecycleState: "InService", HealthStatus: "HEALTHY"},
	}, got, "an id Auto Scaling does not know is left out")
	require.Equal(t, []string{"i-1", "i-2", "i-3"}, f.asgIn[0].InstanceIds)
	require.True(t, got["i-1"].Unhealthy(), "HealthStatus in any case")
	require.False(t, got["i-2"].Unhealthy())

	inst, found, err := actionsOver(f).Instance(ctx, "i-2")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, "api", inst.Group)
	_, found, err = actionsOver(f).Instance(ctx, "i-3")
	require.NoError(t, err)
	require.False(t, found)

	f.err = errors.New("boom")
	_, found, err = actionsOver(f).Instance(ctx, "i-1")
	require.Same(t, f.err, err)
	require.False(t, found)
}

func TestLifecycleActionsEC2InstanceTellsItsImageAndWhetherItIsLeaving(t *testing.T) {
	ctx := context.Background()
	f := &fakeActionsAPI{ec2: []ec2types.Reservation{{}, {Instances: []ec2types.Instance{{InstanceId: aws.String("i-1"),
		ImageId: aws.String("ami-1"), State: &ec2types.InstanceState{Name: ec2types.InstanceStateNameShuttingDown}}}}}}
	inst, found, err := actionsOver(f).EC2Instance(ctx, "i-1")
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, providers.EC2Instance{ID: "i-1", ImageID: "ami-1", State: "shutting-down"}, inst)
	require.True(t, inst.ShuttingDownOrTerminated())
	require.Equal(t, []string{"i-1"}, f.ec2In[0].InstanceIds)

	for state, leaving := range map[ec2types.InstanceStateName]bool{ec2types.InstanceStateNameTerminated: true,
		ec2types.InstanceStateNameRunning: false, ec2types.InstanceStateNamePending: false, "": false} {
		require.Equal(t, leaving, providers.EC2Instance{State: string(state)}.ShuttingDownOrTerminated(), state)
	}

	f.ec2 = nil
	_, found, err = actionsOver(f).EC2Instance(ctx, "i-1")
	require.NoError(t, err)
	require.False(t, found, "EC2 answers without it")

	f.err = &smithy.GenericAPIError{Code: "InvalidInstanceID.NotFound", Message: "The instance ID 'i-9' does not exist"}
	_, found, err = actionsOver(f).EC2Instance(ctx, "i-9")
	require.True(t, awsapi.IsInstanceNotFound(err), "EC2's error, for the caller to classify")
	require.False(t, found)
}
