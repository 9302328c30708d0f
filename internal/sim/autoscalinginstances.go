package sim

import (
	"context"
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// maxAutoScalingInstanceIDs is the most InstanceIds (and MaxRecords) a DescribeAutoScalingInstances call takes
// (Amazon EC2 Auto Scaling API Reference, "DescribeAutoScalingInstances": InstanceIds "Maximum number of 50
// items", MaxRecords "The default value is 50 and the maximum value is 50").
const maxAutoScalingInstanceIDs = 50

// DescribeAutoScalingInstances describes the instances named in InstanceIds (at most 50), or every instance of
// every group in launch order, paged by MaxRecords (default and at most 50) and NextToken. Each answer names the
// instance's group, lifecycle state (Pending:Wait, InService, Terminating:Wait, ReplacingRootVolume:Wait ...),
// health, Availability Zone, scale-in protection and launch template version. An id Auto Scaling does not
// know, or whose instance is Terminated, is left out of the answer without an error.
// Amazon EC2 Auto Scaling API Reference, "DescribeAutoScalingInstances" and "AutoScalingInstanceDetails".
// Errors: ValidationError (more than 50 ids, an id of more than 19 characters, MaxRecords outside 1..50, a
// malformed NextToken).
func (c *AutoScalingClient) DescribeAutoScalingInstances(ctx context.Context, in *autoscaling.DescribeAutoScalingInstancesInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingInstancesOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:DescribeAutoScalingInstances")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil {
		in = &autoscaling.DescribeAutoScalingInstancesInput{}
	}
	if len(in.InstanceIds) > maxAutoScalingInstanceIDs {
		return nil, apiError("ValidationError", "1 validation error detected: Value at 'instanceIds' failed to satisfy constraint: Member must have length less than or equal to %d", maxAutoScalingInstanceIDs)
	}
	for _, id := range in.InstanceIds {
		// InstanceIds members: Length Constraints Minimum 1, Maximum 19 (API Reference, DescribeAutoScalingInstances).
		if len(id) < 1 || len(id) > 19 {
			return nil, apiError("ValidationError", "1 validation error detected: Value '[%s]' at 'instanceIds' failed to satisfy constraint: Member must satisfy constraint: [Member must have length less than or equal to 19, Member must have length greater than or equal to 1]", id)
		}
	}
	limit := maxAutoScalingInstanceIDs
	if in.MaxRecords != nil {
		if *in.MaxRecords < 1 || *in.MaxRecords > maxAutoScalingInstanceIDs {
			return nil, apiError("ValidationError", "1 validation error detected: Value '%d' at 'maxRecords' failed to satisfy constraint: Member must have value between 1 and %d", *in.MaxRecords, maxAutoScalingInstanceIDs)
		}
		limit = int(*in.MaxRecords)
	}
	ids := in.InstanceIds
	if len(ids) == 0 {
		ids = as.ec2.instanceOrder
	}
	from := 0
	if in.NextToken != nil {
		s, ok := cutPrefix(*in.NextToken, "asi-")
		n, err := strconv.Atoi(s)
		if !ok || err != nil || n < 0 || n > len(ids) {
			return nil, apiError("ValidationError", "The token '%s' is invalid.", *in.NextToken)
		}
		from = n
	}
	out := &autoscaling.DescribeAutoScalingInstancesOutput{AutoScalingInstances: []astypes.AutoScalingInstanceDetails{}}
	for i := from; i < len(ids); i++ {
		inst := as.ec2.instance(ids[i])
		if inst == nil || inst.state == string(astypes.LifecycleStateTerminated) || inst.state == string(astypes.LifecycleStateWarmedTerminated) {
			continue
		}
		if len(out.AutoScalingInstances) == limit {
			out.NextToken = ptr(fmt.Sprintf("asi-%d", i))
			break
		}
		health := "HEALTHY"
		if inst.unhealthy {
			health = "UNHEALTHY"
		}
		out.AutoScalingInstances = append(out.AutoScalingInstances, astypes.AutoScalingInstanceDetails{
			InstanceId:           ptr(inst.id),
			AutoScalingGroupName: ptr(inst.group),
			AvailabilityZone:     ptr(inst.az),
			LifecycleState:       ptr(inst.state),
			HealthStatus:         ptr(health),
			ProtectedFromScaleIn: ptr(inst.protected),
			InstanceType:         ptr(inst.instanceType),
			LaunchTemplate: &astypes.LaunchTemplateSpecification{LaunchTemplateId: ptr(inst.ltID), LaunchTemplateName: ptr(inst.ltName),
				Version: ptr(fmt.Sprint(inst.ltVersion))},
		})
	}
	return out, nil
}

// StartRootVolumeReplacement begins the root volume replacement of an InService instance, as an instance
// refresh with the ReplaceRootVolume strategy does: the instance goes ReplacingRootVolume and, with terminating
// lifecycle hooks, waits in ReplacingRootVolume:Wait with one lifecycle action per hook (notifications sent as
// for any terminating action); once every action is completed (or timed out) it proceeds, gets a new root
// volume from the group's current launch template version BootDelay later and is InService again. It returns
// the tokens of the lifecycle actions. Setup helper: not counted.
// Amazon EC2 Auto Scaling User Guide, "Replace root volumes during instance refresh": lifecycle states
// ReplacingRootVolume, ReplacingRootVolume:Wait, ReplacingRootVolume:Proceed, RootVolumeReplaced; the instance
// keeps running and is not replaced by a new one. Errors: ValidationError (unknown instance, not InService).
func (as *autoScalingService) StartRootVolumeReplacement(instanceID string) ([]string, error) {
	defer as.lock()()
	inst := as.ec2.instance(instanceID)
	if inst == nil || inst.state != string(astypes.LifecycleStateInService) {
		return nil, apiError("ValidationError", "Instance %s is not InService", instanceID)
	}
	g := as.groups[inst.group]
	inst.state = string(astypes.LifecycleStateReplacingRootVolume)
	hooks := g.hooksFor(TransitionTerminating)
	if len(hooks) == 0 {
		as.replaceRootVolume(inst)
		return nil, nil
	}
	as.enterWait(inst, g, TransitionTerminating, hooks)
	inst.state = string(astypes.LifecycleStateReplacingRootVolumeWait)
	var tokens []string
	for _, act := range inst.actions {
		tokens = append(tokens, act.token)
	}
	as.settle()
	return tokens, nil
}

// replaceRootVolume swaps the instance's root volume and puts it back in service (see
// StartRootVolumeReplacement). Callers hold the lock.
func (as *autoScalingService) replaceRootVolume(inst *instance) {
	inst.state = string(astypes.LifecycleStateReplacingRootVolumeProceed)
	as.after(as.opts.BootDelay, func() {
		if inst.state != string(astypes.LifecycleStateReplacingRootVolumeProceed) {
			return
		}
		if _, v := as.currentVersion(as.groups[inst.group]); v != nil {
			inst.imageID = as.ec2.launchImageID(v.imageID)
		}
		inst.state = string(astypes.LifecycleStateInService)
	})
}
