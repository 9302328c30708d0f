package events

import (
	"fmt"
	"strings"
	"unicode"
)

// Describe returns a one-line human summary of the event for logs and `message inspect`, such as
//
//	lifecycle action TERMINATING for instance i-0a1b2c3d4e5f60718 in group ecs-prod-cluster-asg (hook patch-agent-drain) [direct, id 2b9a61c4-...]
//	Parameter Store Change Update /golden-ami/ecs/al2023 [eventbridge, id 9547ef2d-...]
//
// Control characters and line separators from the message are replaced by spaces, so the summary is always one line.
func (e Event) Describe() string {
	var b strings.Builder
	switch e.Kind {
	case KindParameterChange:
		b.WriteString("Parameter Store Change")
		if p := e.Parameter; p != nil {
			fmt.Fprintf(&b, " %s %s", p.Operation, p.Name)
			if p.Exception != "" {
				fmt.Fprintf(&b, ": value failed validation (%s), ignored", p.Exception)
			}
		}
	case KindLifecycleAction:
		b.WriteString("lifecycle action")
		if l := e.Lifecycle; l != nil {
			fmt.Fprintf(&b, " %s for instance %s in group %s (hook %s",
				strings.TrimPrefix(l.Transition, "autoscaling:EC2_INSTANCE_"), l.InstanceID, l.GroupName, l.HookName)
			if l.Action != "" {
				fmt.Fprintf(&b, ", action %s", l.Action)
			}
			b.WriteString(")")
		}
	case KindScheduledTick:
		b.WriteString("scheduled tick: resolve every tracked parameter")
	case KindAMIAnnouncement:
		b.WriteString("ECS-optimized AMI update announcement: resolve every tracked parameter")
	case KindWakeUp:
		if w := e.Wake; w != nil && w.Group != "" {
			fmt.Fprintf(&b, "wake-up (%s, instance %s): look again at group %s", e.DetailType, w.InstanceID, w.Group)
		} else if w != nil && w.Cluster == "" {
			fmt.Fprintf(&b, "wake-up (%s, instance %s, %s): look again at the managed group that listed the instance", e.DetailType, w.InstanceID, w.Status)
		} else if w != nil {
			fmt.Fprintf(&b, "wake-up (%s, instance %s, %s): look again at the groups of cluster %s", e.DetailType, w.InstanceID, w.Status, w.Cluster)
		}
	case KindOperatorWakeUp:
		if o := e.Operator; o != nil && o.Global() {
			fmt.Fprintf(&b, "operator wake-up (%s of the global pause by %s): look again at every managed group", o.Action, o.Who)
		} else if o != nil {
			fmt.Fprintf(&b, "operator wake-up (%s by %s): look again at group %s", o.Action, o.Who, o.Group)
		}
	case KindTestNotification:
		fmt.Fprintf(&b, "test notification for group %s, ignored", e.Group)
	case KindUnknown:
		b.WriteString("ignored: " + e.Reason)
	default:
		fmt.Fprintf(&b, "message of kind %q", e.Kind)
	}
	fmt.Fprintf(&b, " [%s", e.Envelope)
	if e.Topic != "" {
		fmt.Fprintf(&b, " from %s", e.Topic)
	}
	if e.ID != "" {
		fmt.Fprintf(&b, ", id %s", e.ID)
	}
	b.WriteString("]")
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return ' '
		}
		return r
	}, b.String())
}
