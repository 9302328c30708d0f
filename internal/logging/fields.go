// Package logging names the structured log fields the agent writes (one place, so that queries over the logs
// keep working) and builds the zap logger.
package logging

import (
	"fmt"
	"io"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Log field names. Every log line about a group, instance or message uses these keys.
const (
	Group             = "group"
	Platform          = "platform"
	Cluster           = "cluster"
	InstanceID        = "instance_id"
	NewInstanceID     = "new_instance_id"
	ContainerInstance = "container_instance"
	Node              = "node"
	AMI               = "ami"
	PreviousAMI       = "previous_ami"
	Parameter         = "parameter"
	RolloutPhase      = "rollout_phase"
	RolloutStep       = "rollout_step"
	WorkflowPhase     = "workflow_phase" // EKS upgrade workflow (internal/eksupgrade)
	WorkflowStep      = "workflow_step"
	Reason            = "reason"
	MessageID         = "message_id"
	Queue             = "queue" // which of the agent's queues a message came from ("wake-up": --wake-up-queue-url)
	MessageKind       = "message_kind"
	ReceiveCount      = "receive_count"
	LifecycleToken    = "lifecycle_action_token"
	LifecycleHook     = "lifecycle_hook"
	Transition        = "lifecycle_transition"
	Result            = "result"
	Error             = "error"
	RetryIn           = "retry_in"    // backoff before a failed step is tried again
	Attempt           = "attempt"     // failures in a row of the step being retried
	Build             = "build"       // the agent's version, commit and build date (internal/buildinfo)
	Actor             = "actor"       // the identity (STS caller ARN) of the operator whose command the agent acts on
	Records           = "records"     // how many table records a start-up step changed (state.DynamoDB.Backfill)
	GroupCount        = "group_count" // how many groups a line is about, when Group names only the first few
)

// New returns a JSON logger at the given level ("debug", "info", "warn", "error") writing to w.
func New(w io.Writer, level string) (*zap.Logger, error) {
	var lvl zapcore.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("log level %q: want debug, info, warn or error", level)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	enc.TimeKey = "time"
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.AddSync(w), lvl)
	return zap.New(core), nil
}
