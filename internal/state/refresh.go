package state

import "time"

// StepInstanceRefresh is the one step of a rollout by instance refresh: Auto Scaling launches and terminates
// the instances (Amazon EC2 Auto Scaling User Guide, "Use an instance refresh to update instances in an Auto
// Scaling group"), the agent holds each launch on its launching hook until the instance serves, drains each
// termination on its terminating hook, and follows the refresh with DescribeInstanceRefreshes. The intent is
// written before StartInstanceRefresh and the refresh id after: StartInstanceRefresh takes no client token, so
// after a crash the active refresh whose desired configuration names the recorded version is adopted.
const StepInstanceRefresh Step = "InstanceRefresh"

// RefreshProgress is the durable progress of a rollout by instance refresh (Rollout.Refresh; nil for the other
// strategies).
type RefreshProgress struct {
	// LaunchTemplateID and LaunchTemplateName name the group's launch template; MixedInstances: the group
	// references it through a mixed instances policy, and so does the refresh's DesiredConfiguration.
	LaunchTemplateID   string `json:"launchTemplateId" dynamodbav:"ltID"`
	LaunchTemplateName string `json:"launchTemplateName,omitempty" dynamodbav:"ltName,omitempty"`
	MixedInstances     bool   `json:"mixedInstances,omitempty" dynamodbav:"mixed,omitempty"`
	// Version is the explicit launch template version with the target AMI (never $Latest or $Default);
	// PreviousVersion the explicit version the group ran before the rollout, which a rollback returns to.
	Version         string `json:"version" dynamodbav:"version"`
	PreviousVersion string `json:"previousVersion,omitempty" dynamodbav:"previousVersion,omitempty"`
	// Preferences sent with StartInstanceRefresh, recorded at the start: MinHealthyPercentage and
	// MaxHealthyPercentage (100 and 100 + ceil(100 x BatchSize / Desired)), InstanceWarmup in seconds, and the
	// alarms of the AlarmSpecification (at most 10).
	MinHealthyPercentage int32    `json:"minHealthyPercentage" dynamodbav:"minHealthy"`
	MaxHealthyPercentage int32    `json:"maxHealthyPercentage" dynamodbav:"maxHealthy"`
	BatchSize            int32    `json:"batchSize" dynamodbav:"batch"`
	Desired              int32    `json:"desired" dynamodbav:"desired"`
	InstanceWarmup       int32    `json:"instanceWarmup" dynamodbav:"warmup"`
	Alarms               []string `json:"alarms,omitempty" dynamodbav:"alarms,omitempty"`
	// GroupOnVersion: the group's own launch template reference already named Version when this refresh was
	// decided (an earlier refresh of the rollout succeeded, a canary's): RollbackInstanceRefresh would return it
	// to Version, so a rollback is a refresh back to PreviousVersion.
	GroupOnVersion bool `json:"groupOnVersion,omitempty" dynamodbav:"groupOnVersion,omitempty"`
	// CanaryPercentage is the checkpoint of a canary (the share of the group the refresh replaces before it
	// bakes for CanaryBake seconds and ends), 0 when the refresh replaces the whole group.
	CanaryPercentage int32 `json:"canaryPercentage,omitempty" dynamodbav:"canaryPct,omitempty"`
	CanaryBake       int32 `json:"canaryBake,omitempty" dynamodbav:"canaryBake,omitempty"`
	// ReplaceProtected: ECS manages the group's scale-in protection (managed termination protection), so the
	// refresh replaces protected instances too (ScaleInProtectedInstances Refresh); otherwise the protection is
	// the user's and the refresh waits for it (Wait).
	ReplaceProtected bool `json:"replaceProtected,omitempty" dynamodbav:"replaceProtected,omitempty"`
	// ReplaceAll: the refresh replaces every instance, also those already on Version (SkipMatching off): a
	// rollout of instances past the group's maximum instance age, whose AMI is already the target.
	ReplaceAll bool `json:"replaceAll,omitempty" dynamodbav:"replaceAll,omitempty"`
	// SpacingDelay (seconds, 0 for none) holds the refresh at a checkpoint after each batch, so that ECS managed
	// scaling sees the group without the refresh's extra instance between replacements (SpacingCheckpoints).
	SpacingDelay int32 `json:"spacingDelay,omitempty" dynamodbav:"spacing,omitempty"`
	// LaunchingHook is the agent's launching lifecycle hook of the group: an ABANDON on it halts the refresh.
	LaunchingHook string `json:"launchingHook,omitempty" dynamodbav:"launchingHook,omitempty"`
	// TerminatingHook is the agent's terminating lifecycle hook of the group ("" when ECS's managed draining
	// hook drains it): a drain held on it at its deadline halts the refresh.
	TerminatingHook string `json:"terminatingHook,omitempty" dynamodbav:"terminatingHook,omitempty"`
	// HooksReadAt is when the start read the group's lifecycle hooks and found the agent's (zero in records
	// written before it was kept): a later read that lacks one holds the start or cancels the refresh.
	HooksReadAt time.Time `json:"hooksReadAt,omitzero" dynamodbav:"hooksReadAt,omitempty"`
	// StartedAt is when the intent was written (before StartInstanceRefresh); ID is the refresh id, written
	// after the call ("" while the call's answer is not recorded).
	StartedAt time.Time `json:"startedAt" dynamodbav:"startedAt"`
	ID        string    `json:"id,omitempty" dynamodbav:"id,omitempty"`
	// Status, StatusReason, PercentageComplete and InstancesToUpdate are the refresh as last described.
	Status             string `json:"status,omitempty" dynamodbav:"status,omitempty"`
	StatusReason       string `json:"statusReason,omitempty" dynamodbav:"statusReason,omitempty"`
	PercentageComplete int32  `json:"percentageComplete" dynamodbav:"pct"`
	InstancesToUpdate  int32  `json:"instancesToUpdate" dynamodbav:"toUpdate"`
	// Cancel says why the agent cancelled the refresh (a gate's reason); "" while it did not.
	Cancel string `json:"cancel,omitempty" dynamodbav:"cancel,omitempty"`
	// Rollback: the refresh moves the group back to PreviousVersion, by RollbackInstanceRefresh on ID
	// (ByAPI) or by a refresh of its own to PreviousVersion. RequestedBy names the operator whose
	// `patch-agent rollback` asked for it ("" for the agent's own rollback after a halt).
	Rollback    bool   `json:"rollback,omitempty" dynamodbav:"rollback,omitempty"`
	ByAPI       bool   `json:"byApi,omitempty" dynamodbav:"byApi,omitempty"`
	RequestedBy string `json:"requestedBy,omitempty" dynamodbav:"requestedBy,omitempty"`
	// Halt is why the rollout halts once the refresh in flight is cancelled or rolled back ("" when none).
	Halt string `json:"halt,omitempty" dynamodbav:"halt,omitempty"`
}

// TargetVersion is the launch template version the refresh in flight replaces instances onto: Version, or
// PreviousVersion for a rollback by a refresh of the agent's own.
func (p RefreshProgress) TargetVersion() string {
	if p.Rollback && !p.ByAPI {
		return p.PreviousVersion
	}
	return p.Version
}

// SpacingCheckpoints are the CheckpointPercentages of a spaced refresh: the share of InstancesToUpdate done
// after each batch, ascending and unique, ending with 100 (Amazon EC2 Auto Scaling User Guide, "Add checkpoints
// to an instance refresh": a refresh whose last checkpoint is below 100 ends there, Successful, with the rest
// of the group not replaced); none when SpacingDelay is 0.
func (p RefreshProgress) SpacingCheckpoints() []int32 {
	if p.SpacingDelay <= 0 || p.Desired <= 0 || p.BatchSize <= 0 {
		return nil
	}
	var out []int32
	for done := p.BatchSize; done < p.Desired; done += p.BatchSize {
		pct := 100 * done / p.Desired
		if pct > 0 && (len(out) == 0 || out[len(out)-1] < pct) {
			out = append(out, pct)
		}
	}
	return append(out, 100)
}

func cloneRefresh(p *RefreshProgress) *RefreshProgress {
	if p == nil {
		return nil
	}
	c := *p
	c.Alarms = append([]string(nil), p.Alarms...)
	return &c
}
