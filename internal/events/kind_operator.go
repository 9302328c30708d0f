package events

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// KindOperatorWakeUp is the wake-up an operator command (patch-agent approve, rollback, pause, resume) sends
// to the agent's queue once its DynamoDB write succeeded, so that the agent looks at the target now instead
// of at its next safety poll. It is a claim, like every message: it names a target and what the operator
// did, but the agent only looks again at that target — re-reading the store (the approval, the rollback,
// the pause lock) and AWS as the poll would — and never acts on the action it names. A forged one costs one
// extra look and nothing else (docs/events.md, "Operator wake-ups").
const KindOperatorWakeUp Kind = "OperatorWakeUp"

// IsWakeUp reports whether k only asks the agent to look at a target soon (KindWakeUp, KindOperatorWakeUp):
// its effect is recorded in memory, so it belongs on the wake-up queue and is deleted with the poll's
// DeleteMessageBatch; any other kind there is mis-routed.
func (k Kind) IsWakeUp() bool { return k == KindWakeUp || k == KindOperatorWakeUp }

// The EventBridge-shaped envelope of an operator wake-up: source and detail-type of our own, never of AWS.
// The command sends it with SQS SendMessage straight to the queue (it does not pass through EventBridge),
// in the shape of an EventBridge event so that one parser reads every queued event.
const (
	OperatorSource     = "patch-agent.operator"
	OperatorDetailType = "Patch Agent Operator Command"
)

// The actions an operator wake-up may name: what the command wrote.
const (
	OperatorApprove  = "approve"
	OperatorRollback = "rollback"
	OperatorPause    = "pause"
	OperatorResume   = "resume"
	OperatorRetry    = "retry"
)

// OperatorGlobal is the Scope of a wake-up after a pause or resume of the global lock: every managed target.
const OperatorGlobal = "global"

// OperatorWakeUp is the detail of an operator wake-up.
type OperatorWakeUp struct {
	// Action is what the command wrote: OperatorApprove, OperatorRollback, OperatorPause, OperatorResume or
	// OperatorRetry.
	Action string `json:"action"`
	// Group is the Auto Scaling group (or nodegroup/CLUSTER/NAME) the command wrote for; empty with Scope
	// OperatorGlobal.
	Group string `json:"group,omitempty"`
	// Scope is OperatorGlobal for the global pause lock, else empty.
	Scope string `json:"scope,omitempty"`
	// Who sent it: the identity the command recorded (an STS caller ARN, or --who with a state file).
	Who string `json:"who"`
}

// Global reports whether the wake-up is about every managed target (the global pause lock).
func (o OperatorWakeUp) Global() bool { return o.Scope == OperatorGlobal }

// NewOperatorWakeUp returns the message body an operator command sends: an EventBridge-shaped event with
// OperatorSource and OperatorDetailType, id and time (UTC, RFC 3339) as given, region and account of the
// queue (either may be ""). The detail is checked as Parse checks it: an error names what is wrong.
func NewOperatorWakeUp(o OperatorWakeUp, id, region, account string, at time.Time) ([]byte, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	detail, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	return json.Marshal(eventBridgeEvent{Version: "0", ID: id, DetailType: OperatorDetailType, Source: OperatorSource,
		Account: account, Time: at.UTC().Format(time.RFC3339), Region: region, Resources: []string{}, Detail: detail})
}

// validate checks an operator wake-up's detail: a known action, who sent it, and a target — a group, or the
// global scope for pause and resume.
func (o OperatorWakeUp) validate() error {
	switch o.Action {
	case OperatorApprove, OperatorRollback, OperatorPause, OperatorResume, OperatorRetry:
	default:
		return fmt.Errorf("detail.action %q is not one of approve, rollback, pause, resume, retry", o.Action)
	}
	if strings.TrimSpace(o.Who) == "" {
		return errors.New("detail.who is missing")
	}
	switch {
	case o.Scope != "" && o.Scope != OperatorGlobal:
		return fmt.Errorf("detail.scope %q is not %q", o.Scope, OperatorGlobal)
	case o.Global() && o.Group != "":
		return errors.New("detail names both a group and the global scope")
	case o.Global() && o.Action != OperatorPause && o.Action != OperatorResume:
		return fmt.Errorf("detail.scope global goes only with pause and resume, not %s", o.Action)
	case !o.Global() && strings.TrimSpace(o.Group) == "":
		return errors.New("detail.group is missing (and the scope is not global)")
	}
	return nil
}

// operatorWakeUp converts an operator wake-up (OperatorSource, OperatorDetailType). Sample
// (testdata/operator-wakeup-approve.json):
//
//	{"version":"0","id":"5f0c8a8e-...","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator",
//	 "account":"111122223333","time":"2026-12-01T09:00:00Z","region":"eu-west-1","resources":[],
//	 "detail":{"action":"approve","group":"prod-ecs-asg","who":"arn:aws:sts::111122223333:assumed-role/ops/alice"}}
//
// A detail without a known action, without who, or without a target is malformed (the consumer leaves it
// for the dead-letter queue).
func operatorWakeUp(ev *Event, detail json.RawMessage) error {
	var o OperatorWakeUp
	if err := json.Unmarshal(detail, &o); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	ev.Kind, ev.Group, ev.Operator = KindOperatorWakeUp, o.Group, &o
	return nil
}
