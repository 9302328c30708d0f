package events

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"unicode/utf8"
)

// EventBridge detail-types of lifecycle actions ("Amazon EC2 Auto Scaling User Guide: Amazon EC2 Auto Scaling
// event reference", Lifecycle action events).
const (
	detailTypeLaunchAction    = "EC2 Instance-launch Lifecycle Action"
	detailTypeTerminateAction = "EC2 Instance-terminate Lifecycle Action"
)

// hookMessage is a lifecycle action notification as Auto Scaling writes it: the whole body when the hook's
// notification target is the queue (or an SNS topic), and the detail of the EventBridge lifecycle action
// events (which leave out AccountId, RequestId, Service and Time: the envelope carries them).
type hookMessage struct {
	Origin               string `json:"Origin"`
	Destination          string `json:"Destination"`
	LifecycleHookName    string `json:"LifecycleHookName"`
	AccountID            string `json:"AccountId"`
	RequestID            string `json:"RequestId"`
	LifecycleTransition  string `json:"LifecycleTransition"`
	AutoScalingGroupName string `json:"AutoScalingGroupName"`
	Service              string `json:"Service"`
	Time                 string `json:"Time"`
	EC2InstanceID        string `json:"EC2InstanceId"`
	LifecycleActionToken string `json:"LifecycleActionToken"`
	NotificationMetadata string `json:"NotificationMetadata"`
	Action               string `json:"Action"`
}

// hookMessageMembers maps each member name of hookMessage, folded as encoding/json folds it (foldName), to the
// name Auto Scaling writes.
var hookMessageMembers = func() map[string]string {
	out := map[string]string{}
	t := reflect.TypeFor[hookMessage]()
	for i := range t.NumField() {
		name := t.Field(i).Tag.Get("json")
		out[foldName(name)] = name
	}
	return out
}()

// unmarshalHookMessage decodes a lifecycle action into m, its members named as Auto Scaling names them, case
// included: encoding/json matches member names without regard to case (and folds "ſ" with "s", "K" with
// "k"), so "EC2InstanceID" or "lifecycleactiontoken" would otherwise pass for members Auto Scaling never writes that way, and of two
// members differing in case the last would win. Such a message is forged or garbled: an error.
func unmarshalHookMessage(data []byte, m *hookMessage) error {
	var members map[string]json.RawMessage
	if err := json.Unmarshal(data, &members); err != nil {
		return err
	}
	for name := range members {
		if want, ok := hookMessageMembers[foldName(name)]; ok && name != want {
			return fmt.Errorf("lifecycle action member %q is not Auto Scaling's %q (member names are matched with their case)", truncate(name, 80), want)
		}
	}
	return json.Unmarshal(data, m)
}

// instanceIDPattern is what an EC2 instance id can be: "i-" and 8 or 17 lowercase hexadecimal digits (Amazon
// EC2 User Guide, "Resource IDs"), loosened to 1-17 digits, all within the 19 characters a member of
// DescribeAutoScalingInstances' InstanceIds may have (Amazon EC2 Auto Scaling API Reference,
// DescribeAutoScalingInstances).
var instanceIDPattern = regexp.MustCompile(`^i-[0-9a-f]{1,17}$`)

// hookNamePattern is the shape Auto Scaling gives a lifecycle hook's name (Amazon EC2 Auto Scaling API
// Reference, PutLifecycleHook: LifecycleHookName, 1 to 255 characters of A-Z, a-z, 0-9, hyphen, underscore and
// slash).
var hookNamePattern = regexp.MustCompile(`^[A-Za-z0-9_/-]{1,255}$`)

// maxGroupNameChars is the most characters an Auto Scaling group name has (Amazon EC2 Auto Scaling API
// Reference, CreateAutoScalingGroup: AutoScalingGroupName, length 1 to 255).
const maxGroupNameChars = 255

// groupNameOK reports whether name can be an Auto Scaling group's name: 1 to maxGroupNameChars characters
// matching the pattern [\u0020-\uD7FF\uE000-\uFFFD\uD800\uDC00-\uDBFF\uDFFF\r\n\t]* (Amazon EC2 Auto
// Scaling API Reference, CreateAutoScalingGroup, AutoScalingGroupName), that is no control character of
// U+0000-U+001F but tab, line feed and carriage return, and neither U+FFFE nor U+FFFF. Characters are
// counted as runes, the fewest of any way to count them (UTF-16 code units, bytes), so no name Auto Scaling
// accepts is refused.
func groupNameOK(name string) bool {
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxGroupNameChars {
		return false
	}
	for _, r := range name {
		if r < 0x20 && r != '\t' && r != '\n' && r != '\r' || r == 0xFFFE || r == 0xFFFF {
			return false
		}
	}
	return true
}

// lifecycleAction checks that m names everything CompleteLifecycleAction needs, an instance id of EC2's shape,
// a group name Auto Scaling could have given and a known transition.
func (m hookMessage) lifecycleAction() (*LifecycleAction, error) {
	var missing []string
	for _, f := range []struct{ name, value string }{
		{"LifecycleActionToken", m.LifecycleActionToken},
		{"LifecycleHookName", m.LifecycleHookName}, // CompleteLifecycleAction requires it
		{"EC2InstanceId", m.EC2InstanceID},
		{"AutoScalingGroupName", m.AutoScalingGroupName},
		{"LifecycleTransition", m.LifecycleTransition},
	} {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("lifecycle action (hook %q, instance %q, group %q) is missing %s",
			m.LifecycleHookName, m.EC2InstanceID, m.AutoScalingGroupName, strings.Join(missing, ", "))
	}
	if !instanceIDPattern.MatchString(m.EC2InstanceID) {
		// Auto Scaling refuses such an id (ValidationError) on every look: the message would be held forever
		// instead of reaching the dead-letter queue.
		return nil, fmt.Errorf("lifecycle action (hook %q, group %q): EC2InstanceId %q is not an EC2 instance id (i- and up to 17 hexadecimal digits)",
			m.LifecycleHookName, m.AutoScalingGroupName, m.EC2InstanceID)
	}
	if !hookNamePattern.MatchString(m.LifecycleHookName) {
		// No hook has such a name: the message is forged or garbled, and the name must not reach a log line, a
		// notification or an operator's terminal as it is.
		return nil, fmt.Errorf("lifecycle action (instance %s): LifecycleHookName %q (%d characters) is not a lifecycle hook name "+
			"(1 to 255 of A-Z, a-z, 0-9, -, _ and /)", m.EC2InstanceID, truncate(m.LifecycleHookName, 80), utf8.RuneCountInString(m.LifecycleHookName))
	}
	if !groupNameOK(m.AutoScalingGroupName) {
		// No group has such a name: the message is forged or garbled, and the name must not reach a log line
		// or an operator's terminal as it is.
		return nil, fmt.Errorf("lifecycle action (hook %q, instance %s): AutoScalingGroupName %q (%d characters) is not an Auto Scaling group name "+
			"(1 to %d characters, no control character but tab, line feed and carriage return)",
			m.LifecycleHookName, m.EC2InstanceID, truncate(m.AutoScalingGroupName, 80), utf8.RuneCountInString(m.AutoScalingGroupName), maxGroupNameChars)
	}
	if m.LifecycleTransition != TransitionLaunching && m.LifecycleTransition != TransitionTerminating {
		return nil, fmt.Errorf("lifecycle action for instance %s in group %s: LifecycleTransition %q is neither %s nor %s",
			m.EC2InstanceID, m.AutoScalingGroupName, m.LifecycleTransition, TransitionLaunching, TransitionTerminating)
	}
	return &LifecycleAction{
		GroupName:            m.AutoScalingGroupName,
		HookName:             m.LifecycleHookName,
		InstanceID:           m.EC2InstanceID,
		Token:                m.LifecycleActionToken,
		Transition:           m.LifecycleTransition,
		Action:               m.Action,
		Origin:               m.Origin,
		Destination:          m.Destination,
		NotificationMetadata: m.NotificationMetadata,
	}, nil
}

// parseHookMessage converts a lifecycle action notification that a lifecycle hook sent to its notification
// target (the queue itself, or an SNS topic subscribed by the queue) to KindLifecycleAction. Shape from
// "Amazon EC2 Auto Scaling User Guide: Configure a notification target for lifecycle notifications" (Route
// notifications to Amazon SQS / Amazon SNS, Notification message example for Amazon SNS and Amazon SQS) and
// "Amazon EC2 Auto Scaling lifecycle hooks". The instance waits in Pending:Wait or Terminating:Wait until
// CompleteLifecycleAction is called with the token, or the heartbeat timeout applies the default result.
//
// Sample (testdata/asg-hook-direct-terminating.json):
//
//	{"Origin":"AutoScalingGroup","LifecycleHookName":"patch-agent-drain","Destination":"EC2",
//	 "AccountId":"111122223333","RequestId":"2b9a61c4-7e0d-4c1e-9f4a-1c0a5d3e7b21",
//	 "LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","AutoScalingGroupName":"ecs-prod-cluster-asg",
//	 "Service":"AWS Auto Scaling","Time":"2024-03-04T09:15:31.102Z","EC2InstanceId":"i-0a1b2c3d4e5f60718",
//	 "LifecycleActionToken":"5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13","NotificationMetadata":"{\"cluster\":\"prod\"}"}
//
// Through SNS the same object is the notification's Message (testdata/sns-wrapped-asg-hook-terminating.json).
// The ID is the RequestId, or the SNS MessageId when the message came through SNS.
//
// It fails when the token, hook name, instance id, group name or transition is missing, the instance id or
// group name is not one AWS could have given, or the transition is neither LAUNCHING nor TERMINATING.
func parseHookMessage(body []byte, envelope Envelope) (Event, error) {
	var m hookMessage
	if err := unmarshalHookMessage(body, &m); err != nil {
		return Event{}, fmt.Errorf("decoding lifecycle action: %w", err)
	}
	action, err := m.lifecycleAction()
	if err != nil {
		return Event{}, err
	}
	t, err := parseTime("lifecycle action Time", m.Time)
	if err != nil {
		return Event{}, err
	}
	return Event{
		Kind:      KindLifecycleAction,
		Envelope:  envelope,
		ID:        m.RequestID,
		Source:    "aws.autoscaling",
		Account:   m.AccountID,
		Time:      t,
		Group:     action.GroupName,
		Lifecycle: action,
	}, nil
}

// lifecycleFromEventBridge converts the EventBridge lifecycle action events (source aws.autoscaling,
// detail-type "EC2 Instance-launch Lifecycle Action" or "EC2 Instance-terminate Lifecycle Action") to
// KindLifecycleAction. Shape from "Amazon EC2 Auto Scaling User Guide: Amazon EC2 Auto Scaling event
// reference" (Lifecycle action events) and "Use EventBridge to handle Auto Scaling events". The detail is the
// hook message without AccountId, RequestId, Service and Time.
//
// Sample (testdata/eventbridge-lifecycle-terminate.json):
//
//	{"version":"0","id":"66f9eb1a-5b2f-b2e0-2177-1ab6eaa34884","detail-type":"EC2 Instance-terminate Lifecycle Action",
//	 "source":"aws.autoscaling","account":"111122223333","time":"2022-02-08T09:12:05Z","region":"eu-west-3",
//	 "resources":["arn:aws:autoscaling:eu-west-3:111122223333:autoScalingGroup:5fa554ef-732f-4e67-8f2b-3474caf747f2:autoScalingGroupName/eks-workers-a"],
//	 "detail":{"LifecycleActionToken":"be2184df-afe7-4db9-a4a4-e6d6a72210d1","AutoScalingGroupName":"eks-workers-a",
//	           "LifecycleHookName":"patch-agent-drain","EC2InstanceId":"i-0c5e2a7b9d1f34e86",
//	           "LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","Origin":"AutoScalingGroup","Destination":"EC2"}}
//
// An instance refresh with the ReplaceRootVolume strategy sends a terminate action with "Action":
// "ReplaceRootVolume" and Origin and Destination both AutoScalingGroup: the instance is drained, its root
// volume replaced, and it comes back through a launch action with the same Action (field case C14,
// testdata/eventbridge-lifecycle-terminate-replace-root-volume.json):
//
//	"detail":{...,"LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING","Origin":"AutoScalingGroup",
//	          "Destination":"AutoScalingGroup","Action":"ReplaceRootVolume"}
//
// It fails as parseHookMessage does, and when the detail-type and the transition disagree.
func lifecycleFromEventBridge(ev *Event, detail json.RawMessage) error {
	var m hookMessage
	if err := unmarshalHookMessage(detail, &m); err != nil {
		return err
	}
	action, err := m.lifecycleAction()
	if err != nil {
		return err
	}
	want := TransitionLaunching
	if ev.DetailType == detailTypeTerminateAction {
		want = TransitionTerminating
	}
	if action.Transition != want {
		return fmt.Errorf("LifecycleTransition %s contradicts the detail-type", action.Transition)
	}
	ev.Kind = KindLifecycleAction
	ev.Group = action.GroupName
	ev.Lifecycle = action
	return nil
}
