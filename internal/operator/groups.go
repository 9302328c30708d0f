package operator

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
)

// tagEnabled is the opt-in tag (model.TagEnabled; not imported, so that this package stays free of the
// rollout engine's packages).
const tagEnabled = "patch-agent/enabled"

// ErrUnknownGroup is returned (wrapped) by ConfirmGroup when Auto Scaling has no group of that name, and by
// the CLI when a state file holds no record of it: a misspelt --group must fail, not leave the fleet rolling.
var ErrUnknownGroup = errors.New("no such Auto Scaling group")

// ErrNotOptedIn is returned (wrapped) by ConfirmGroup for a group that exists without the opt-in tag
// patch-agent/enabled=true: the agent never acts on it, so a pause or an approval of it would do nothing.
var ErrNotOptedIn = errors.New("not opted in to patch-agent")

// GroupsAPI is the Auto Scaling call ConfirmGroup makes (satisfied by *autoscaling.Client and internal/sim).
type GroupsAPI interface {
	DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
}

// ConfirmGroup checks with Auto Scaling that group exists and carries the opt-in tag patch-agent/enabled=true
// (one DescribeAutoScalingGroups call naming it: a name Auto Scaling does not know is left out of the answer,
// not an error — Amazon EC2 Auto Scaling API Reference, DescribeAutoScalingGroups). A group that exists and is
// opted in but that the agent has no rollout record of yet is confirmed: its pause applies from the agent's
// first tick on it. Errors: ErrUnknownGroup, ErrNotOptedIn (both wrapped, naming the group), or the call's
// error.
func ConfirmGroup(ctx context.Context, api GroupsAPI, group string) error {
	out, err := api.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{group}})
	if err != nil {
		return fmt.Errorf("confirming Auto Scaling group %s: %w", group, err)
	}
	for _, g := range out.AutoScalingGroups {
		if aws.ToString(g.AutoScalingGroupName) != group {
			continue
		}
		for _, t := range g.Tags {
			if aws.ToString(t.Key) == tagEnabled && strings.EqualFold(strings.TrimSpace(aws.ToString(t.Value)), "true") {
				return nil
			}
		}
		return fmt.Errorf("Auto Scaling group %s is %w (no tag %s=true): the agent never acts on it", group, ErrNotOptedIn, tagEnabled)
	}
	return fmt.Errorf("%w named %s in this account and region (is the name right? `patch-agent status` lists the managed groups)", ErrUnknownGroup, group)
}
