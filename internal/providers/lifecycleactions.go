package providers

import (
	"context"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/events"
)

// LifecycleActions owns the Auto Scaling and EC2 calls of the lifecycle action handler (lifecycleaction.Hooks):
// CompleteLifecycleAction, RecordLifecycleActionHeartbeat and DescribeAutoScalingInstances (Amazon EC2 Auto
// Scaling API Reference) and DescribeInstances (Amazon EC2 API Reference). It keeps no state: a value built
// from the two clients per call is as good as a kept one.
//
// Complete and Heartbeat name a lifecycle action by its InstanceId and LifecycleHookName, never by the
// message's LifecycleActionToken (API Reference, CompleteLifecycleAction and RecordLifecycleActionHeartbeat:
// "either the token or the instance ID"). The token is a claim that nothing confirms: DescribeAutoScalingInstances
// tells the instance's group and wait state, not its action's token. An instance waits on at most one action
// per hook, so the instance and hook the handler confirmed name exactly the action it drains for
// (model.ActionKey); a made-up token could otherwise get the heartbeat refused, the record closed as "no
// longer active", and the real action, whose message was lost, left to time out undrained.
type LifecycleActions struct {
	AutoScaling awsapi.AutoScaling
	EC2         awsapi.EC2
}

// Complete completes action a with one CompleteLifecycleAction call by group, hook and instance, with
// LifecycleActionResult result (model.ResultContinue or model.ResultAbandon). active is false, with no error,
// when Auto Scaling answers that no lifecycle action of that instance and hook is active
// (awsapi.IsNoActiveLifecycleAction: completed before, elsewhere, or timed out; field case C6). Other errors
// are Auto Scaling's, unwrapped; the caller adds what it was doing.
func (p LifecycleActions) Complete(ctx context.Context, a events.LifecycleAction, result string) (active bool, err error) {
	_, err = p.AutoScaling.CompleteLifecycleAction(ctx, &autoscaling.CompleteLifecycleActionInput{
		AutoScalingGroupName: aws.String(a.GroupName), LifecycleHookName: aws.String(a.HookName),
		InstanceId: aws.String(a.InstanceID), LifecycleActionResult: aws.String(result)})
	return activeAction(err)
}

// Heartbeat records a heartbeat of action a with one RecordLifecycleActionHeartbeat call by group, hook and
// instance: Auto Scaling restarts the action's heartbeat timeout, up to the hook's global timeout (Amazon EC2
// Auto Scaling User Guide, "Amazon EC2 Auto Scaling lifecycle hooks"). urgent sends it in the client-side
// limiter's priority lane (awsapi.WithUrgent), so that it never queues behind a fleet pass's reads. active is
// false, with no error, when Auto Scaling answers that no lifecycle action of that instance and hook is active
// (awsapi.IsNoActiveLifecycleAction); an accepted heartbeat is also Auto Scaling's word that one waits. Other
// errors are Auto Scaling's, unwrapped.
func (p LifecycleActions) Heartbeat(ctx context.Context, a events.LifecycleAction, urgent bool) (active bool, err error) {
	if urgent {
		ctx = awsapi.WithUrgent(ctx)
	}
	_, err = p.AutoScaling.RecordLifecycleActionHeartbeat(ctx, &autoscaling.RecordLifecycleActionHeartbeatInput{
		AutoScalingGroupName: aws.String(a.GroupName), LifecycleHookName: aws.String(a.HookName),
		InstanceId: aws.String(a.InstanceID)})
	return activeAction(err)
}

// activeAction classifies the error of CompleteLifecycleAction or RecordLifecycleActionHeartbeat: Auto
// Scaling's "No active Lifecycle Action found" is the answer "not active", not an error.
func activeAction(err error) (bool, error) {
	if awsapi.IsNoActiveLifecycleAction(err) {
		return false, nil
	}
	return err == nil, err
}

// MaxAutoScalingInstanceIDs is the most InstanceIds a DescribeAutoScalingInstances call takes (Amazon EC2
// Auto Scaling API Reference, "DescribeAutoScalingInstances": "Maximum number of 50 items").
const MaxAutoScalingInstanceIDs = 50

// AutoScalingInstance is an instance as DescribeAutoScalingInstances describes it (API Reference,
// AutoScalingInstanceDetails).
type AutoScalingInstance struct {
	ID string
	// Group is the Auto Scaling group the instance is in.
	Group string
	// LifecycleState is its lifecycle state as Auto Scaling names it ("InService", "Terminating:Wait",
	// "Warmed:Pending:Wait", ...: API Reference, AutoScalingInstanceDetails, LifecycleState).
	LifecycleState string
	// HealthStatus is "HEALTHY" or "UNHEALTHY" (Auto Scaling's health check).
	HealthStatus string
}

// Unhealthy reports whether Auto Scaling reports the instance unhealthy (HealthStatus UNHEALTHY, any case).
func (i AutoScalingInstance) Unhealthy() bool { return strings.EqualFold(i.HealthStatus, "UNHEALTHY") }

// Instances describes ids (at most MaxAutoScalingInstanceIDs: Auto Scaling answers more with a
// ValidationError) with one DescribeAutoScalingInstances call, by instance id. An id Auto Scaling does not
// know (never launched in a group, detached, terminated a while ago) is left out, not an error. Errors are
// Auto Scaling's, unwrapped.
func (p LifecycleActions) Instances(ctx context.Context, ids []string) (map[string]AutoScalingInstance, error) {
	out, err := p.AutoScaling.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: ids})
	if err != nil {
		return nil, err
	}
	described := make(map[string]AutoScalingInstance, len(out.AutoScalingInstances))
	for _, i := range out.AutoScalingInstances {
		id := aws.ToString(i.InstanceId)
		described[id] = AutoScalingInstance{ID: id, Group: aws.ToString(i.AutoScalingGroupName),
			LifecycleState: aws.ToString(i.LifecycleState), HealthStatus: aws.ToString(i.HealthStatus)}
	}
	return described, nil
}

// Instance describes one instance as Instances does; found is false when Auto Scaling does not know it.
func (p LifecycleActions) Instance(ctx context.Context, id string) (inst AutoScalingInstance, found bool, err error) {
	described, err := p.Instances(ctx, []string{id})
	inst, found = described[id]
	return inst, found, err
}

// EC2Instance is an instance as EC2's DescribeInstances describes it (Amazon EC2 API Reference, Instance).
type EC2Instance struct {
	ID string
	// ImageID is the AMI it runs ("ami-...").
	ImageID string
	// State is its instance state name (pending, running, shutting-down, terminated, stopping, stopped; ""
	// when EC2 gives none).
	State string
}

// ShuttingDownOrTerminated reports whether the instance is on its way out or gone (State shutting-down or
// terminated).
func (i EC2Instance) ShuttingDownOrTerminated() bool {
	return i.State == string(ec2types.InstanceStateNameShuttingDown) || i.State == string(ec2types.InstanceStateNameTerminated)
}

// EC2Instance describes one instance with one EC2 DescribeInstances call by instance id; found is false when
// EC2 answers without it. A recently terminated instance is still described, usually for less than an hour
// (Amazon EC2 API Reference, DescribeInstances). Errors are EC2's, unwrapped: awsapi.IsInstanceNotFound tells
// an id EC2 does not know (InvalidInstanceID.NotFound, also right after RunInstances: Amazon EC2 API Reference,
// "Eventual consistency in the Amazon EC2 API") or that is malformed.
func (p LifecycleActions) EC2Instance(ctx context.Context, id string) (inst EC2Instance, found bool, err error) {
	out, err := p.EC2.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		return EC2Instance{}, false, err
	}
	for _, r := range out.Reservations {
		for _, i := range r.Instances {
			inst = EC2Instance{ID: aws.ToString(i.InstanceId), ImageID: aws.ToString(i.ImageId)}
			if i.State != nil {
				inst.State = string(i.State.Name)
			}
			return inst, true, nil
		}
	}
	return EC2Instance{}, false, nil
}
