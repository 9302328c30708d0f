package operate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/schema"
)

// Dispositions of `message inspect`: what the agent does with the message.
const (
	// DispositionAct: the agent acts on it and deletes it once the effect is durable.
	DispositionAct = "act"
	// DispositionHold: the agent holds it (extends its visibility) while the work lasts — a lifecycle
	// action's drain — and deletes it once the action is completed.
	DispositionHold = "hold"
	// DispositionIgnore: the agent deletes it without acting; warning says what to look at, if anything.
	DispositionIgnore = "ignore"
	// DispositionDeadLetter: malformed; the agent never acts on it nor deletes it, so after the queue's
	// maxReceiveCount receives the redrive policy moves it to the dead-letter queue.
	DispositionDeadLetter = "dead-letter"
)

// InspectDocument is the JSON of `message inspect`: every field always present.
type InspectDocument struct {
	SchemaVersion int `json:"schemaVersion"`
	// Disposition is act, hold, ignore or dead-letter.
	Disposition string `json:"disposition"`
	// Action says in words what the agent does, and what it checks with AWS first.
	Action string `json:"action"`
	// Warning is what an operator should look at ("" when nothing).
	Warning string `json:"warning"`
	// Error is why the message is malformed ("" when it is not).
	Error string `json:"error"`
	// Event is the parsed message, null when malformed.
	Event *eventView `json:"event"`
}

// eventView is events.Event with every field present and the time null when the message has none.
type eventView struct {
	Kind       events.Kind      `json:"kind"`
	Envelope   events.Envelope  `json:"envelope"`
	ID         string           `json:"id"`
	Source     string           `json:"source"`
	DetailType string           `json:"detailType"`
	Account    string           `json:"account"`
	Region     string           `json:"region"`
	Time       *time.Time       `json:"time"`
	Group      string           `json:"group"`
	Topic      string           `json:"topic"`
	Parameter  *parameterView   `json:"parameter"`
	Lifecycle  *lifecycleAction `json:"lifecycleAction"`
	WakeUp     *wakeUpView      `json:"wakeUp"`
	Reason     string           `json:"reason"`
}

// wakeUpView is what a wake-up event names (events.WakeUp): every field present, empty when the event does not say.
type wakeUpView struct {
	Group      string `json:"group"`
	Cluster    string `json:"cluster"`
	InstanceID string `json:"instanceId"`
	Status     string `json:"status"`
}

type parameterView struct {
	Name      string `json:"name"`
	Operation string `json:"operation"`
	Type      string `json:"type"`
	DataType  string `json:"dataType"`
	Exception string `json:"exception"`
}

type lifecycleAction struct {
	GroupName            string `json:"autoScalingGroupName"`
	HookName             string `json:"lifecycleHookName"`
	InstanceID           string `json:"instanceId"`
	Token                string `json:"lifecycleActionToken"`
	Transition           string `json:"lifecycleTransition"`
	Action               string `json:"action"`
	Origin               string `json:"origin"`
	Destination          string `json:"destination"`
	NotificationMetadata string `json:"notificationMetadata"`
}

func viewOf(ev events.Event) *eventView {
	v := &eventView{Kind: ev.Kind, Envelope: ev.Envelope, ID: ev.ID, Source: ev.Source, DetailType: ev.DetailType,
		Account: ev.Account, Region: ev.Region, Group: ev.Group, Topic: ev.Topic, Reason: ev.Reason}
	if !ev.Time.IsZero() {
		t := ev.Time.UTC()
		v.Time = &t
	}
	if p := ev.Parameter; p != nil {
		v.Parameter = &parameterView{Name: p.Name, Operation: p.Operation, Type: p.Type, DataType: p.DataType, Exception: p.Exception}
	}
	if l := ev.Lifecycle; l != nil {
		v.Lifecycle = &lifecycleAction{GroupName: l.GroupName, HookName: l.HookName, InstanceID: l.InstanceID, Token: l.Token,
			Transition: l.Transition, Action: l.Action, Origin: l.Origin, Destination: l.Destination, NotificationMetadata: l.NotificationMetadata}
	}
	if w := ev.Wake; w != nil {
		v.WakeUp = &wakeUpView{Group: w.Group, Cluster: w.Cluster, InstanceID: w.InstanceID, Status: w.Status}
	}
	return v
}

// inspectMessage parses body as the agent does (events.Parse) and says what the agent would do with it.
// topics are the SNS topics the queue is meant to get notifications from (none: not checked). It never
// calls AWS: the checks the agent makes first (Auto Scaling's confirmation of a lifecycle action, the
// group's opt-in tags, the AMI gate) are named in Action, not made.
func inspectMessage(body []byte, topics []string) InspectDocument {
	d := InspectDocument{SchemaVersion: schema.Version}
	ev, err := events.Parse(body)
	if err != nil {
		d.Disposition, d.Error = DispositionDeadLetter, err.Error()
		d.Action = "none: a malformed message is never acted on nor deleted; after the queue's maxReceiveCount receives " +
			"its redrive policy moves it to the dead-letter queue"
		return d
	}
	d.Event = viewOf(ev)
	switch ev.Kind {
	case events.KindParameterChange:
		p := ev.Parameter
		switch {
		case p.Exception != "":
			d.Disposition = DispositionIgnore
			d.Action = fmt.Sprintf("none: Parameter Store failed to validate the new value of %s", p.Name)
			d.Warning = "the parameter's value failed validation (" + p.Exception + "): fix the value; no group is rolled to it"
		case p.Operation == "Delete":
			d.Disposition = DispositionAct
			d.Action = fmt.Sprintf("marks %s missing: the opted-in groups whose %s names it get no rollout until it exists again", p.Name, "patch-agent/ami-parameter")
			d.Warning = "parameter " + p.Name + " was deleted"
		default:
			d.Disposition = DispositionAct
			d.Action = fmt.Sprintf("resolves %s and rolls the opted-in groups whose patch-agent/ami-parameter names it to its AMI, "+
				"once the AMI gate accepts the image (available, allowed owner) and the group's gates allow (pause, approval, soak, window, alarms); "+
				"ignored when no opted-in group uses the parameter", p.Name)
		}
	case events.KindScheduledTick, events.KindAMIAnnouncement:
		d.Disposition = DispositionAct
		d.Action = "resolves every AMI parameter the opted-in groups use and rolls the groups whose parameter names a new AMI (AMI gate and group gates first)"
	case events.KindLifecycleAction:
		l := ev.Lifecycle
		switch {
		case l.HookName == model.ECSManagedDrainingHookName:
			d.Disposition = DispositionIgnore
			d.Action = "none: ECS's own managed-draining hook; ECS drains the container instance and completes the action"
		case !l.Terminating():
			d.Disposition = DispositionHold
			d.Action = fmt.Sprintf("if group %s is opted in: confirms with Auto Scaling that %s waits in Pending:Wait under hook %s, holds the message until the instance "+
				"is healthy in its cluster, then completes the launching action (CONTINUE; ABANDON at the deadline) and deletes the message",
				l.GroupName, l.InstanceID, l.HookName)
		default:
			drain := "drains it (ECS: container instance DRAINING; EKS: cordon, eviction under PodDisruptionBudgets)"
			if l.Action == events.ActionReplaceRootVolume {
				drain += "; the instance comes back with a new root volume"
			}
			d.Disposition = DispositionHold
			d.Action = fmt.Sprintf("if group %s is opted in: confirms with Auto Scaling that %s waits in Terminating:Wait under hook %s, %s, "+
				"sends heartbeats while the drain lasts, completes the action (CONTINUE), then deletes the message; "+
				"a group the agent does not manage, or an action Auto Scaling does not confirm, is ignored with a warning", l.GroupName, l.InstanceID, l.HookName, drain)
		}
	case events.KindWakeUp:
		d.Disposition = DispositionAct
		what := "group " + ev.Wake.Group
		switch {
		case ev.Wake.Group != "":
		case ev.Wake.Cluster != "":
			what = "the ECS groups of cluster " + ev.Wake.Cluster
		default: // an EC2 Instance State-change Notification names only the instance
			what = "the managed group that listed instance " + ev.Wake.InstanceID + " at its last look (if none did, nothing)"
		}
		d.Action = "looks again at " + what + " now instead of at the next poll (a re-read of AWS; the event itself changes nothing), then deletes the message"
	case events.KindOperatorWakeUp:
		o := ev.Operator
		what := "group " + o.Group + " (ignored when the agent does not manage it)"
		if o.Global() {
			what = "every managed group"
		}
		d.Disposition = DispositionAct
		d.Action = fmt.Sprintf("looks again at %s now instead of at the next safety poll, re-reading the rollout record, the pause locks "+
			"and AWS (the message claims `patch-agent %s` by %s; the claim itself changes nothing), then deletes the message", what, o.Action, o.Who)
	case events.KindTestNotification:
		d.Disposition = DispositionIgnore
		d.Action = "none: " + ev.Reason
	default:
		d.Disposition = DispositionIgnore
		d.Action = "none: " + ev.Reason
		d.Warning = "the agent does not act on this kind of message: if it was meant for the agent, check the sender (EventBridge rule, hook target, SNS subscription)"
	}
	if w := checkTopic(ev, topics); w != "" {
		d.Warning = strings.TrimPrefix(d.Warning+"; "+w, "; ")
	}
	return d
}

// checkTopic warns when a message came through SNS from a topic other than the ones given.
func checkTopic(ev events.Event, topics []string) string {
	if len(topics) == 0 || (ev.Envelope != events.EnvelopeSNS && ev.Envelope != events.EnvelopeSNSBridge) {
		return ""
	}
	for _, t := range topics {
		if t == ev.Topic {
			return ""
		}
	}
	return fmt.Sprintf("delivered by SNS topic %s, not by the configured %s: the queue's access policy should not let it in "+
		"(the agent itself does not check the topic)", ev.Topic, strings.Join(topics, ", "))
}

// errMalformedMessage is returned (exit status 1) after the dead-letter document is printed.
var errMalformedMessage = errors.New("malformed message: the agent leaves it for the dead-letter queue")
