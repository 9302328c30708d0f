// Package metrics keeps the agent's metrics and publishes them: a Registry that observes the rollouts
// (model.Observer) and the queue consumer's counters, a Publisher that sends them to Amazon CloudWatch
// every interval, and a Prometheus text exposition for /metrics. docs/operations.md lists every metric with a
// suggested alarm.
package metrics

import (
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
)

// Namespace is the CloudWatch namespace the Publisher uses by default.
const Namespace = "PatchAgent"

// Dimension names of the per-group metrics.
const (
	DimensionGroup    = "Group"
	DimensionPlatform = "Platform"
	// DimensionReason is a lifecycleaction.Reject* reason (a short, fixed set: a forged message cannot make new
	// series): the one dimension of LifecycleMessagesRejected, and the third of AMIRejected and Alerts (after Group
	// and Platform).
	DimensionReason = "Reason"
)

// Metric names, as published to CloudWatch. Per-group metrics carry the dimensions Group and Platform;
// agent-wide ones carry none.
const (
	InstancesTotal            = "InstancesTotal"
	InstancesOnTargetAMI      = "InstancesOnTargetAMI"
	InstancesOutdated         = "InstancesOutdated"
	TargetAMIAgeHours         = "TargetAMIAgeHours"
	RolloutInProgress         = "RolloutInProgress"
	RolloutHalted             = "RolloutHalted"
	ReplacementsSucceeded     = "ReplacementsSucceeded"
	ReplacementsFailed        = "ReplacementsFailed"
	DrainSeconds              = "DrainSeconds"
	LifecycleActionsCompleted = "LifecycleActionsCompleted"
	LifecycleMessagesRejected = "LifecycleMessagesRejected"
	MessagesProcessed         = "MessagesProcessed"
	MessagesIgnored           = "MessagesIgnored"
	MessagesFailed            = "MessagesFailed"
	OldestMessageAgeSeconds   = "OldestMessageAgeSeconds"
	AgentHeartbeat            = "AgentHeartbeat"
	// AMIRejected counts target AMIs the AMI gate refused, per group and Reason.
	AMIRejected = "AMIRejected"
	// Alerts counts alerts per group and Reason (the model.Alert* kind): a source gone missing or
	// restored, a drain deadline reached, a drain timeout capped, a launch short of capacity, a soak skipped.
	Alerts = "Alerts"
	// SetBacks counts the outside changes (an infrastructure-as-code apply) that set a group's launch template
	// back to another AMI after the agent rolled it to its target (model.AlertSetBack).
	SetBacks = "SetBacks"
)

// Kind says how a metric's value is published.
type Kind int

const (
	// Gauge: the current value is published every interval.
	Gauge Kind = iota
	// Counter: CloudWatch receives the increase since the last successful publish (sum per period);
	// Prometheus the cumulative total since the agent started.
	Counter
)

// Definition describes one metric.
type Definition struct {
	// Name is the CloudWatch metric name.
	Name string
	// Unit is the CloudWatch unit.
	Unit cwtypes.StandardUnit
	Kind Kind
	// PerGroup metrics carry the dimensions Group and Platform.
	PerGroup bool
	// Prometheus is the name in the text exposition (snake case, patch_agent_ prefix, _total for counters).
	Prometheus string
	// Help says what the metric measures.
	Help string
}

var definitions = []Definition{
	{InstancesTotal, cwtypes.StandardUnitCount, Gauge, true, "patch_agent_group_instances",
		"Instances in the Auto Scaling group, in any lifecycle state, as last observed."},
	{InstancesOnTargetAMI, cwtypes.StandardUnitCount, Gauge, true, "patch_agent_group_instances_on_target_ami",
		"In-service instances running the rollout's target AMI."},
	{InstancesOutdated, cwtypes.StandardUnitCount, Gauge, true, "patch_agent_group_instances_outdated",
		"Instances not running the target AMI (terminating ones not counted)."},
	{TargetAMIAgeHours, cwtypes.StandardUnitNone, Gauge, true, "patch_agent_target_ami_age_hours",
		"Hours since the AMI source (SSM parameter) last changed to the target AMI."},
	{RolloutInProgress, cwtypes.StandardUnitNone, Gauge, true, "patch_agent_rollout_in_progress",
		"1 while a rollout is between detection and an end state (Waiting included), else 0."},
	{RolloutHalted, cwtypes.StandardUnitNone, Gauge, true, "patch_agent_rollout_halted",
		"1 while the rollout is Halted, or RollingBack/RolledBack after a failure, else 0."},
	{ReplacementsSucceeded, cwtypes.StandardUnitCount, Counter, true, "patch_agent_replacements_succeeded_total",
		"Outdated instances replaced (replacement healthy, old instance drained and gone)."},
	{ReplacementsFailed, cwtypes.StandardUnitCount, Counter, true, "patch_agent_replacements_failed_total",
		"Replacements that halted the rollout (unhealthy replacement, drain timeout, wrong AMI launched)."},
	{DrainSeconds, cwtypes.StandardUnitSeconds, Gauge, true, "patch_agent_drain_seconds",
		"Duration of the group's last drain, in seconds."},
	{LifecycleActionsCompleted, cwtypes.StandardUnitCount, Counter, true, "patch_agent_lifecycle_actions_completed_total",
		"Lifecycle actions the agent completed (or found no longer active)."},
	{LifecycleMessagesRejected, cwtypes.StandardUnitCount, Counter, false, "patch_agent_lifecycle_messages_rejected_total",
		"Lifecycle messages deleted unconfirmed, by Reason (Auto Scaling did not confirm the instance's group, hook or wait state; or an unmanaged group): nothing was drained."},
	{MessagesProcessed, cwtypes.StandardUnitCount, Counter, false, "patch_agent_messages_processed_total",
		"Queue messages deleted after their effect was durable."},
	{MessagesIgnored, cwtypes.StandardUnitCount, Counter, false, "patch_agent_messages_ignored_total",
		"Queue messages deleted without effect, deliberately (test notifications, unmanaged groups, duplicates)."},
	{MessagesFailed, cwtypes.StandardUnitCount, Counter, false, "patch_agent_messages_failed_total",
		"Queue messages malformed or whose handling failed; left for redelivery and the dead-letter queue."},
	{OldestMessageAgeSeconds, cwtypes.StandardUnitSeconds, Gauge, false, "patch_agent_oldest_message_age_seconds",
		"Age in seconds of the oldest message the last receive returned (0 when it returned none)."},
	{AgentHeartbeat, cwtypes.StandardUnitCount, Gauge, false, "patch_agent_heartbeat",
		"1 per publish: the agent is alive and publishing."},
	{AMIRejected, cwtypes.StandardUnitCount, Counter, true, "patch_agent_ami_rejected_total",
		"Target AMIs the AMI gate refused (once per distinct refusal), with dimension Reason: ImageNotFound, ImageNotAvailable, OwnerNotAllowed, ArchitectureMismatch, OSFamilyChange or CurrentFamilyUnknown."},
	{Alerts, cwtypes.StandardUnitCount, Counter, true, "patch_agent_alerts_total",
		"Alerts, with dimension Reason: SourceMissing, SourceRestored (once per transition), DrainDeadline (a terminating lifecycle action continued undrained), DrainTimeoutCapped, SoakSkipped, SetBack, Misconfigured (an opted-in group left alone for a tag the agent does not accept; once per distinct error)."},
	{SetBacks, cwtypes.StandardUnitCount, Counter, true, "patch_agent_set_backs_total",
		"Outside changes (an infrastructure-as-code apply) that pointed the group's launch template back at another AMI after the agent rolled it to its target; the second for one AMI holds the group."},
}

// Definitions returns every metric the agent publishes, in a stable order.
func Definitions() []Definition { return append([]Definition(nil), definitions...) }

// Lookup returns the definition of the named metric.
func Lookup(name string) (Definition, bool) {
	for _, d := range definitions {
		if d.Name == name {
			return d, true
		}
	}
	return Definition{}, false
}

// SeriesKey names one series in Snapshot: the metric name for agent-wide metrics, else
// "Name{Group=g,Platform=p}" (",Platform=p" left out when the platform is unknown).
func SeriesKey(name, group, platform string) string {
	if group == "" {
		return name
	}
	if platform == "" {
		return name + "{" + DimensionGroup + "=" + group + "}"
	}
	return name + "{" + DimensionGroup + "=" + group + "," + DimensionPlatform + "=" + platform + "}"
}
