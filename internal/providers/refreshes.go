package providers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/state"
)

// Refreshes owns the instance refresh calls of the refresh strategy (engine/rollout_refresh.go) over Auto Scaling:
// StartInstanceRefresh, DescribeInstanceRefreshes, CancelInstanceRefresh and RollbackInstanceRefresh (Amazon
// EC2 Auto Scaling API Reference).
type Refreshes struct{ API awsapi.AutoScaling }

// Instance refresh statuses (API Reference, InstanceRefresh: Status).
const (
	RefreshPending            = string(astypes.InstanceRefreshStatusPending)
	RefreshInProgress         = string(astypes.InstanceRefreshStatusInProgress)
	RefreshBaking             = string(astypes.InstanceRefreshStatusBaking)
	RefreshSuccessful         = string(astypes.InstanceRefreshStatusSuccessful)
	RefreshFailed             = string(astypes.InstanceRefreshStatusFailed)
	RefreshCancelling         = string(astypes.InstanceRefreshStatusCancelling)
	RefreshCancelled          = string(astypes.InstanceRefreshStatusCancelled)
	RefreshRollbackInProgress = string(astypes.InstanceRefreshStatusRollbackInProgress)
	RefreshRollbackSuccessful = string(astypes.InstanceRefreshStatusRollbackSuccessful)
	RefreshRollbackFailed     = string(astypes.InstanceRefreshStatusRollbackFailed)
)

// InstanceRefresh is one refresh of a group as DescribeInstanceRefreshes describes it.
type InstanceRefresh struct {
	ID, Status, StatusReason     string
	PercentageComplete, ToUpdate int32
	StartTime                    time.Time
	// LaunchTemplateID, LaunchTemplateName and Version are what its desired configuration names ("" without one).
	LaunchTemplateID, LaunchTemplateName, Version string
}

// Active reports whether the refresh still holds its group (API Reference, StartInstanceRefresh:
// InstanceRefreshInProgress while one is pending, in progress, baking, cancelling or rolling back).
func (ir InstanceRefresh) Active() bool {
	switch ir.Status {
	case RefreshPending, RefreshInProgress, RefreshBaking, RefreshCancelling, RefreshRollbackInProgress:
		return true
	}
	return false
}

// Names reports whether the refresh's desired configuration names the launch template and version.
func (ir InstanceRefresh) Names(ltID, ltName, version string) bool {
	return ir.Version == version && ((ir.LaunchTemplateID != "" && ir.LaunchTemplateID == ltID) ||
		(ir.LaunchTemplateName != "" && ir.LaunchTemplateName == ltName))
}

// ErrRefreshInProgress is wrapped by Start's error when the group has an active refresh.
var ErrRefreshInProgress = errors.New("an instance refresh is in progress")

// ErrRollbackRefused is wrapped by Rollback's error when Auto Scaling does not roll the refresh back
// (IrreversibleInstanceRefresh: its prerequisites are not met; ActiveInstanceRefreshNotFound: none in progress).
var ErrRollbackRefused = errors.New("the instance refresh cannot be rolled back by Auto Scaling")

// refreshRequest is the StartInstanceRefresh of the recorded intent: DesiredConfiguration names the launch
// template and the explicit version (never $Latest or $Default, so that RollbackInstanceRefresh stays
// possible: API Reference, RollbackInstanceRefresh), and every preference the agent relies on is explicit
// (API Reference, RefreshPreferences).
func refreshRequest(group string, p *state.RefreshProgress) *autoscaling.StartInstanceRefreshInput {
	spec := &astypes.LaunchTemplateSpecification{LaunchTemplateId: aws.String(p.LaunchTemplateID), Version: aws.String(p.TargetVersion())}
	desired := &astypes.DesiredConfiguration{LaunchTemplate: spec}
	if p.MixedInstances {
		desired = &astypes.DesiredConfiguration{MixedInstancesPolicy: &astypes.MixedInstancesPolicy{
			LaunchTemplate: &astypes.LaunchTemplate{LaunchTemplateSpecification: spec}}}
	}
	prefs := &astypes.RefreshPreferences{
		// Launch before terminate: never below desired capacity, at most the batch above it.
		MinHealthyPercentage: aws.Int32(p.MinHealthyPercentage),
		MaxHealthyPercentage: aws.Int32(p.MaxHealthyPercentage),
		// A rollout to a new AMI skips instances already on it; one of instances past their maximum age
		// replaces them all (the AMI is the one they run).
		SkipMatching:   aws.Bool(!p.ReplaceAll),
		InstanceWarmup: aws.Int32(p.InstanceWarmup),
		// Standby is the user's, and so is scale-in protection unless ECS manages it: the refresh waits for
		// them (status names the instances). With managed termination protection ECS turns scale-in
		// protection on for every instance that runs tasks (Amazon ECS Developer Guide, "Control the instances
		// Amazon ECS terminates"), so Wait would wait for each instance until ECS empties it: such a refresh
		// replaces protected instances (Refresh), each drained first on its terminating hook.
		ScaleInProtectedInstances: astypes.ScaleInProtectedInstancesWait,
		StandbyInstances:          astypes.StandbyInstancesWait,
		// The agent decides whether to roll back (RollbackInstanceRefresh), not Auto Scaling.
		AutoRollback: aws.Bool(false),
	}
	if p.ReplaceProtected {
		prefs.ScaleInProtectedInstances = astypes.ScaleInProtectedInstancesRefresh
	}
	if p.Rollback {
		// A refresh back to the previous version runs without the alarms (one in ALARM is why it rolls back, and
		// would fail it at once) and without the canary's checkpoint.
		return &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String(group), Strategy: astypes.RefreshStrategyRolling,
			DesiredConfiguration: desired, Preferences: prefs}
	}
	if len(p.Alarms) > 0 {
		prefs.AlarmSpecification = &astypes.AlarmSpecification{Alarms: append([]string(nil), p.Alarms...)}
	}
	if cps := p.SpacingCheckpoints(); len(cps) > 0 && p.CanaryPercentage == 0 {
		// ECS managed scaling: a checkpoint after each batch (User Guide, "Add checkpoints to an instance
		// refresh") lets CapacityProviderReservation see the group at target between replacements (spacing).
		prefs.CheckpointPercentages = cps
		prefs.CheckpointDelay = aws.Int32(p.SpacingDelay)
	}
	if p.CanaryPercentage > 0 {
		// The canary: a last checkpoint below 100 ends the refresh after the bake (User Guide, "Add checkpoints
		// to an instance refresh"); an alarm of the AlarmSpecification in ALARM during it fails the refresh.
		prefs.CheckpointPercentages = []int32{p.CanaryPercentage}
		prefs.CheckpointDelay = aws.Int32(p.CanaryBake)
	}
	return &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String(group), Strategy: astypes.RefreshStrategyRolling,
		DesiredConfiguration: desired, Preferences: prefs}
}

// Start sends the refresh of the intent p and returns its id. Errors: ErrRefreshInProgress (wrapped), the
// call's.
func (r Refreshes) Start(ctx context.Context, group string, p *state.RefreshProgress) (string, error) {
	out, err := r.API.StartInstanceRefresh(ctx, refreshRequest(group, p))
	var busy *astypes.InstanceRefreshInProgressFault
	if errors.As(err, &busy) {
		return "", fmt.Errorf("%w: %s", ErrRefreshInProgress, err.Error())
	}
	if err != nil {
		return "", fmt.Errorf("starting an instance refresh of %s: %w", group, err)
	}
	return aws.ToString(out.InstanceRefreshId), nil
}

// Describe returns the group's refreshes, newest first (only those of ids when given; the first page, which
// holds the newest).
func (r Refreshes) Describe(ctx context.Context, group string, ids ...string) ([]InstanceRefresh, error) {
	out, err := r.API.DescribeInstanceRefreshes(ctx, &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String(group),
		InstanceRefreshIds: ids})
	if err != nil {
		return nil, fmt.Errorf("describing instance refreshes of %s: %w", group, err)
	}
	refreshes := make([]InstanceRefresh, 0, len(out.InstanceRefreshes))
	for _, ir := range out.InstanceRefreshes {
		v := InstanceRefresh{ID: aws.ToString(ir.InstanceRefreshId), Status: string(ir.Status), StatusReason: aws.ToString(ir.StatusReason),
			PercentageComplete: aws.ToInt32(ir.PercentageComplete), ToUpdate: aws.ToInt32(ir.InstancesToUpdate), StartTime: aws.ToTime(ir.StartTime)}
		if d := ir.DesiredConfiguration; d != nil {
			spec := d.LaunchTemplate
			if spec == nil && d.MixedInstancesPolicy != nil && d.MixedInstancesPolicy.LaunchTemplate != nil {
				spec = d.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification
			}
			if spec != nil {
				v.LaunchTemplateID, v.LaunchTemplateName, v.Version = aws.ToString(spec.LaunchTemplateId), aws.ToString(spec.LaunchTemplateName), aws.ToString(spec.Version)
			}
		}
		refreshes = append(refreshes, v)
	}
	return refreshes, nil
}

// Cancel cancels the group's active refresh (API Reference, CancelInstanceRefresh: Cancelling until the
// launches and terminations in flight end, or at once with waitInFlight false: WaitForTransitioningInstances).
// No active refresh is not an error: it ended meanwhile.
func (r Refreshes) Cancel(ctx context.Context, group string, waitInFlight bool) error {
	in := &autoscaling.CancelInstanceRefreshInput{AutoScalingGroupName: aws.String(group)}
	if !waitInFlight {
		in.WaitForTransitioningInstances = aws.Bool(false)
	}
	_, err := r.API.CancelInstanceRefresh(ctx, in)
	var gone *astypes.ActiveInstanceRefreshNotFoundFault
	if err != nil && !errors.As(err, &gone) {
		return fmt.Errorf("cancelling the instance refresh of %s: %w", group, err)
	}
	return nil
}

// Rollback rolls the group's refresh in progress back (API Reference, RollbackInstanceRefresh). Errors:
// ErrRollbackRefused (wrapped) where Auto Scaling cannot, the call's.
func (r Refreshes) Rollback(ctx context.Context, group string) error {
	_, err := r.API.RollbackInstanceRefresh(ctx, &autoscaling.RollbackInstanceRefreshInput{AutoScalingGroupName: aws.String(group)})
	var irreversible *astypes.IrreversibleInstanceRefreshFault
	var gone *astypes.ActiveInstanceRefreshNotFoundFault
	if errors.As(err, &irreversible) || errors.As(err, &gone) {
		return fmt.Errorf("%w: %s", ErrRollbackRefused, err.Error())
	}
	if err != nil {
		return fmt.Errorf("rolling back the instance refresh of %s: %w", group, err)
	}
	return nil
}
