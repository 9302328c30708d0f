// Package notify sends the agent's notifications to Amazon EventBridge: a "Rollout State Change" event when a
// rollout starts, waits on a gate, halts, rolls back, is rolled back or completes, and a "Lifecycle Action
// Completed" event for every lifecycle action the agent completes. docs/notifications.md documents the detail
// schema and example rules. The Notifier is a model.Observer; FanOut combines it with the metrics
// Registry into the one Observer the agent takes.
package notify

import (
	"strings"
	"time"
)

// Envelope values of every event the agent sends.
const (
	// Source is the "source" of every event.
	Source = "patch-agent"
	// DetailTypeRollout is the detail-type of RolloutDetail events.
	DetailTypeRollout = "Rollout State Change"
	// DetailTypeLifecycle is the detail-type of LifecycleDetail events.
	DetailTypeLifecycle = "Lifecycle Action Completed"
	// DetailTypeRejected is the detail-type of RejectedDetail events (schema RejectedSchemaVersion).
	DetailTypeRejected = "Lifecycle Message Rejected"
	// RejectedSchemaVersion is the version of the RejectedDetail schema, with the same rules as SchemaVersion.
	RejectedSchemaVersion = "1"
	// DetailTypeAlert is the detail-type of AlertDetail events (schema AlertSchemaVersion).
	DetailTypeAlert = "Patch Agent Alert"
	// AlertSchemaVersion is the version of the AlertDetail schema, with the same rules as SchemaVersion.
	AlertSchemaVersion = "1"
	// SchemaVersion is the version of both detail schemas. Fields are only ever added within a version; a
	// field removed or changing meaning makes a new version.
	SchemaVersion = "1"
	// DefaultBus is the event bus used when none is configured.
	DefaultBus = "default"
)

// Values of RolloutDetail.Event.
const (
	// EventStarted: a new target AMI was detected (or a manual rollback was requested) and the rollout began.
	EventStarted = "started"
	// EventWaiting: a gate now holds the rollout (pause, soak, approval, maintenance window, alarm); sent when
	// the kind of gate changes, not when its wording (a remaining time) does.
	EventWaiting = "waiting"
	// EventHalted: a failure stopped the rollout without rollback; Reason says why.
	EventHalted = "halted"
	// EventRollingBack: a failure stopped the rollout and the launch template is being put back.
	EventRollingBack = "rolling-back"
	// EventRolledBack: the rollback finished; Reason keeps the failure.
	EventRolledBack = "rolled-back"
	// EventCompleted: every instance runs the target AMI.
	EventCompleted = "completed"
	// EventAMIRejected: the AMI gate refused the target AMI (field case C20); RejectReason says which rule,
	// Reason what EC2 answered. Nothing was changed; the rollout waits for the source to name another AMI.
	// Sent once per distinct refusal.
	EventAMIRejected = "ami-rejected"
)

// RolloutDetail is the detail of a "Rollout State Change" event (schema version 1). Every field is always
// present; strings that do not apply are "".
type RolloutDetail struct {
	SchemaVersion string `json:"schemaVersion"`
	// Event is what happened: started, waiting, halted, rolling-back, rolled-back, completed or ami-rejected.
	Event    string `json:"event"`
	Group    string `json:"group"`
	Platform string `json:"platform"` // "ecs" or "eks"
	Cluster  string `json:"cluster"`
	// Phase is the rollout's phase after the change, PreviousPhase before it (docs/state.md).
	Phase         string `json:"phase"`
	PreviousPhase string `json:"previousPhase"`
	// Reason explains Waiting, Halted, RollingBack and RolledBack in an operator's words.
	Reason          string `json:"reason"`
	TargetImageID   string `json:"targetImageId"`
	PreviousImageID string `json:"previousImageId"`
	// Instances and OnTarget count the group's instances and those in service on the target AMI, as the
	// agent last observed them.
	Instances int `json:"instances"`
	OnTarget  int `json:"onTarget"`
	// At is when the change was written (RFC 3339, UTC).
	At time.Time `json:"at"`
	// RejectReason is the AMI gate's reason of an ami-rejected event (ImageNotFound, ImageNotAvailable,
	// OwnerNotAllowed, ArchitectureMismatch, OSFamilyChange, CurrentFamilyUnknown); "" for other events.
	// Added in schema version 1.
	RejectReason string `json:"rejectReason"`
	// AgentVersion is the version of the agent that sent the event (`patch-agent version`, e.g. v1.2.3 or
	// v1.2.3-4-gabc1234); "" when the notifier was given none.
	AgentVersion string `json:"agentVersion"`
}

// LifecycleDetail is the detail of a "Lifecycle Action Completed" event (schema version 1).
type LifecycleDetail struct {
	SchemaVersion string `json:"schemaVersion"`
	Group         string `json:"group"`
	Platform      string `json:"platform"`
	Cluster       string `json:"cluster"`
	InstanceID    string `json:"instanceId"`
	// LifecycleHookName and LifecycleTransition are the hook's name and
	// "autoscaling:EC2_INSTANCE_TERMINATING" or "autoscaling:EC2_INSTANCE_LAUNCHING".
	LifecycleHookName   string `json:"lifecycleHookName"`
	LifecycleTransition string `json:"lifecycleTransition"`
	// Result is CONTINUE or ABANDON; Note why (for example that the action was no longer active).
	Result string `json:"result"`
	Note   string `json:"note"`
	// DrainSeconds is how long the drain took, in seconds (0 for launching actions).
	DrainSeconds float64 `json:"drainSeconds"`
	// At is when the action was completed (RFC 3339, UTC).
	At time.Time `json:"at"`
	// AgentVersion is the version of the agent that completed the action, as in RolloutDetail.
	AgentVersion string `json:"agentVersion"`
}

// RejectedDetail is the detail of a "Lifecycle Message Rejected" event (schema version 1): a lifecycle message
// that Auto Scaling did not confirm was deleted and nothing was drained (field case C19). The group, instance
// and hook are what the message claimed; the lifecycle action token is left out.
type RejectedDetail struct {
	SchemaVersion string `json:"schemaVersion"`
	// Reason is one of GroupNotManaged (never sent: routine on a shared queue), InstanceNotFound,
	// InstanceNotInGroup, UnknownHook, LifecycleStateMismatch; Detail says what AWS answered.
	Reason string `json:"reason"`
	Detail string `json:"detail"`
	Group  string `json:"group"`
	// Platform and Cluster of the group, when the agent manages it ("" otherwise).
	Platform            string `json:"platform"`
	Cluster             string `json:"cluster"`
	InstanceID          string `json:"instanceId"`
	LifecycleHookName   string `json:"lifecycleHookName"`
	LifecycleTransition string `json:"lifecycleTransition"`
	// At is when the message was rejected (RFC 3339, UTC).
	At time.Time `json:"at"`
}

// AlertDetail is the detail of a "Patch Agent Alert" event (schema version 1): something an operator should
// hear about that is not a rollout transition by itself (model.Alert). Every field is always present.
type AlertDetail struct {
	SchemaVersion string `json:"schemaVersion"`
	// Alert is the kind: SourceMissing, SourceRestored, DrainDeadline, DrainTimeoutCapped,
	// SoakSkipped, SetBack or Misconfigured (the Reason dimension of the Alerts metric).
	Alert    string `json:"alert"`
	Group    string `json:"group"`
	Platform string `json:"platform"`
	Cluster  string `json:"cluster"`
	// Detail says what happened in an operator's words.
	Detail string `json:"detail"`
	// Who is the identity that caused it (the STS caller ARN of `patch-agent approve --skip-soak`; for SetBack the
	// CreatedBy of the launch template version that set the group back), else "".
	Who string `json:"who"`
	// ImageID is the AMI concerned, else "".
	ImageID string `json:"imageId"`
	// At is when the agent noticed (RFC 3339, UTC).
	At           time.Time `json:"at"`
	AgentVersion string    `json:"agentVersion"`
}

// gateOf returns the kind of gate a rollout reason names ("" when it names none): the reason prefixes the
// orchestrator writes (internal/engine/rollout_gates.go: holdIfPaused, startGate, runGate).
func gateOf(reason string) string {
	for _, g := range []struct{ prefix, kind string }{
		{"paused", "paused"},
		{"soak:", "soak"},
		{"approval:", "approval"},
		{"maintenance window", "maintenance window"},
		{"alarm", "alarm"},
	} {
		if strings.HasPrefix(reason, g.prefix) {
			return g.kind
		}
	}
	return ""
}
