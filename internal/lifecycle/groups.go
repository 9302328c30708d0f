package lifecycle

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Groups is the provider of the Auto Scaling calls the rollout engine decides on: it owns the SDK inputs, so
// the decision code (rollout*.go) says what to do to a group in the field's words and never builds an input
// (TestDecisionFilesImportNoAWSService). Errors are Auto Scaling's, unwrapped, except where a method says
// otherwise; the caller adds what it was doing.
type Groups interface {
	// Traits reads a group's traits: its tags (as described) and its lifecycle hooks (DescribeLifecycleHooks).
	Traits(ctx context.Context, group string, tags map[string]string) (GroupTraits, error)
	// Terminate terminates one instance through its group without decrementing desired capacity
	// (TerminateInstanceInAutoScalingGroup, ShouldDecrementDesiredCapacity false): Auto Scaling launches its
	// successor from the group's launch template, and the group's terminating lifecycle hook, if any, runs
	// (Amazon EC2 Auto Scaling API Reference, TerminateInstanceInAutoScalingGroup). The agent never writes
	// desired capacity, so there is no decrementing form. An instance already gone is not an error
	// (awsapi.IsInstanceNotFound).
	Terminate(ctx context.Context, instanceID string) error
	// Members describes at most maxAutoScalingInstanceIDs (50) instances (DescribeAutoScalingInstances): the
	// group and lifecycle state of each Auto Scaling knows; unknown ids are left out.
	Members(ctx context.Context, instanceIDs []string) ([]GroupMember, error)
}

// GroupMember is one instance as DescribeAutoScalingInstances reports it.
type GroupMember struct {
	InstanceID, Group, LifecycleState string
}

// AutoScalingGroups is the Groups provider over the Auto Scaling API.
type AutoScalingGroups struct {
	API awsapi.AutoScaling
}

var _ Groups = AutoScalingGroups{}

// Traits implements Groups.
func (g AutoScalingGroups) Traits(ctx context.Context, group string, tags map[string]string) (GroupTraits, error) {
	return DescribeTraits(ctx, g.API, group, tags)
}

// Terminate implements Groups.
func (g AutoScalingGroups) Terminate(ctx context.Context, instanceID string) error {
	_, err := g.API.TerminateInstanceInAutoScalingGroup(ctx, &autoscaling.TerminateInstanceInAutoScalingGroupInput{
		InstanceId: aws.String(instanceID), ShouldDecrementDesiredCapacity: aws.Bool(false)})
	if awsapi.IsInstanceNotFound(err) {
		return nil
	}
	return err
}

// Members implements Groups.
func (g AutoScalingGroups) Members(ctx context.Context, instanceIDs []string) ([]GroupMember, error) {
	if len(instanceIDs) > maxAutoScalingInstanceIDs {
		return nil, fmt.Errorf("describing %d instances: at most %d a call", len(instanceIDs), maxAutoScalingInstanceIDs)
	}
	out, err := g.API.DescribeAutoScalingInstances(ctx, &autoscaling.DescribeAutoScalingInstancesInput{InstanceIds: instanceIDs})
	if err != nil {
		return nil, err
	}
	members := make([]GroupMember, 0, len(out.AutoScalingInstances))
	for _, d := range out.AutoScalingInstances {
		members = append(members, GroupMember{InstanceID: aws.ToString(d.InstanceId), Group: aws.ToString(d.AutoScalingGroupName),
			LifecycleState: aws.ToString(d.LifecycleState)})
	}
	return members, nil
}

// GroupDescription is a group as DescribeAutoScalingGroups returns it (GroupView.Group): the decision code
// hands it to providers without reading the SDK type itself.
type GroupDescription = astypes.AutoScalingGroup

// TemplateProvider is the provider of launch template versions the rollout engine decides on (Templates over
// EC2 and Auto Scaling).
type TemplateProvider interface {
	// Resolve returns the version a reference resolves to now ("$Default" and "$Latest" as Auto Scaling does).
	Resolve(ctx context.Context, ref state.LaunchTemplateRef) (TemplateVersion, error)
	// EnsureVersion returns a version of ref's template that is ref's version with ImageId = imageID, creating
	// it unless the agent already did (idempotent after a crash).
	EnsureVersion(ctx context.Context, ref state.LaunchTemplateRef, imageID, why string) (TemplateVersion, error)
	// PointGroup makes the group launch ref (an explicit version).
	PointGroup(ctx context.Context, g GroupDescription, ref state.LaunchTemplateRef) error
}

var _ TemplateProvider = Templates{}

// groups returns the Groups provider: o.Groups, or Auto Scaling itself when unset.
func (o *Orchestrator) groups() Groups {
	if o.Groups != nil {
		return o.Groups
	}
	return AutoScalingGroups{API: o.AutoScaling}
}
