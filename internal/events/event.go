// Package events turns SQS message bodies into typed events (parse.go and one file per message kind) and
// consumes the agent's queue (consumer.go).
package events

import (
	"time"

	"github.com/patch-agent/patch-agent/internal/model"
)

// Kind names what a message is. Every body parses to exactly one Kind, or to an error when it is malformed.
type Kind string

const (
	// KindParameterChange is an EventBridge "Parameter Store Change" event (source aws.ssm) for one parameter.
	KindParameterChange Kind = "ParameterStoreChange"
	// KindScheduledTick is an EventBridge "Scheduled Event" (source aws.events): resolve every tracked parameter now.
	KindScheduledTick Kind = "ScheduledTick"
	// KindLifecycleAction is an Auto Scaling lifecycle action (launching or terminating), delivered directly by a
	// lifecycle hook whose notification target is the queue, through EventBridge, or inside an SNS envelope.
	KindLifecycleAction Kind = "LifecycleAction"
	// KindTestNotification is the autoscaling:TEST_NOTIFICATION a hook sends to its target when it is created.
	KindTestNotification Kind = "TestNotification"
	// KindAMIAnnouncement is the public ECS-optimized AMI update SNS notification: resolve every tracked parameter now.
	KindAMIAnnouncement Kind = "AMIAnnouncement"
	// KindUnknown is a well-formed message of a kind the agent deliberately does not act on.
	KindUnknown Kind = "Unknown"
)

// Envelope names how a message reached the queue.
type Envelope string

const (
	EnvelopeEventBridge Envelope = "eventbridge"     // EventBridge rule target
	EnvelopeDirect      Envelope = "direct"          // straight to the queue: a lifecycle hook whose notification target is the queue
	EnvelopeSNS         Envelope = "sns"             // SNS topic subscription without raw message delivery
	EnvelopeSNSBridge   Envelope = "sns+eventbridge" // an EventBridge event published through SNS
)

// Lifecycle transitions as Auto Scaling names them (model.TransitionLaunching, model.TransitionTerminating).
const (
	TransitionLaunching   = model.TransitionLaunching
	TransitionTerminating = model.TransitionTerminating
)

// ActionReplaceRootVolume is the lifecycle action's "Action" for a root volume replacement
// (model.ActionReplaceRootVolume).
const ActionReplaceRootVolume = model.ActionReplaceRootVolume

// Event is one parsed message. Exactly one of Parameter, Lifecycle, Wake, Operator is set for the kinds that
// carry them.
type Event struct {
	Kind     Kind     `json:"kind"`
	Envelope Envelope `json:"envelope"`
	// ID identifies the event for deduplication: the EventBridge event id, else the SNS MessageId, else the
	// hook's RequestId. Empty when the message carries none.
	ID         string    `json:"id,omitempty"`
	Source     string    `json:"source,omitempty"`     // EventBridge source or "aws.autoscaling" for direct hooks
	DetailType string    `json:"detailType,omitempty"` // EventBridge detail-type, when there is one
	Account    string    `json:"account,omitempty"`
	Region     string    `json:"region,omitempty"`
	Time       time.Time `json:"time,omitempty"`
	// Group is the Auto Scaling group the message is about, when it names one.
	Group string `json:"group,omitempty"`
	// Topic is the ARN of the SNS topic that delivered the message (EnvelopeSNS, EnvelopeSNSBridge).
	Topic string `json:"topic,omitempty"`

	Parameter *ParameterChange `json:"parameter,omitempty"`
	Lifecycle *LifecycleAction `json:"lifecycleAction,omitempty"`
	// Wake is set for KindWakeUp.
	Wake *WakeUp `json:"wake,omitempty"`
	// Operator is set for KindOperatorWakeUp (kind_operator.go).
	Operator *OperatorWakeUp `json:"operator,omitempty"`
	// Reason says why a KindUnknown or KindTestNotification message is ignored.
	Reason string `json:"reason,omitempty"`
}

// ParameterChange is the detail of a Parameter Store Change event.
type ParameterChange struct {
	Name      string `json:"name"`                // parameter name as in the event ("/golden-ami/ecs/al2023" or "MyParam")
	Operation string `json:"operation"`           // Create, Update, Delete, LabelParameterVersion, ...
	Type      string `json:"type,omitempty"`      // String, StringList, SecureString
	DataType  string `json:"dataType,omitempty"`  // "aws:ec2:image" for AMI-validated parameters
	Exception string `json:"exception,omitempty"` // set when Parameter Store failed to validate the value (e.g. aws:ec2:image)
}

// LifecycleAction is an Auto Scaling lifecycle action that waits for CompleteLifecycleAction: the value the
// parser makes of a hook's message, defined in the model so that what the agent reasons about carries no
// dependency on the queue consumer.
type LifecycleAction = model.LifecycleAction
