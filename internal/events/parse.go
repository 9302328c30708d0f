package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// ErrMalformed is wrapped by every error Parse returns: the body is not a message the agent can read (not
// JSON, not an object, or a recognised kind with a required field missing or wrong). The consumer does not
// delete such a message; the queue's redrive policy moves it to the dead-letter queue.
var ErrMalformed = errors.New("malformed message")

// object is a JSON object with its members undecoded; the keys a body carries tell its kind.
type object map[string]json.RawMessage

func (o object) has(key string) bool {
	_, ok := o[key]
	return ok
}

// str returns the member key when it is a JSON string, else "".
func (o object) str(key string) string {
	var s string
	if raw, ok := o[key]; ok && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// Parse reads one SQS message body. It recognises:
//
//   - an SNS notification ("Type":"Notification" with TopicArn and Message, subscription without raw message
//     delivery): its Message is unwrapped and read as one of the shapes below, as the public ECS-optimized
//     AMI update announcement (kind_ami_announcement.go), or as an ignored text message (kind_sns.go);
//   - an EventBridge event ("detail-type" and "source"): dispatched on (source, detail-type) through
//     eventBridgeKinds; pairs not in the table are KindUnknown;
//   - an Auto Scaling lifecycle hook message sent straight to the queue (kind_lifecycle.go);
//   - an Auto Scaling notification with an "Event" member, such as the autoscaling:TEST_NOTIFICATION a hook
//     sends when it is created (kind_test_notification.go).
//
// Any other JSON object is KindUnknown. A body whose members give it two of these shapes, or that spells a
// member telling the kind in other letter case than AWS (checkKindMembers), is malformed. The error, when
// not nil, wraps ErrMalformed and names what is wrong; the Event is then the zero Event. Parse never panics.
func Parse(body []byte) (Event, error) {
	ev, err := parse(body)
	if err != nil {
		// Nothing below does I/O: every error is about the body.
		return Event{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return ev, nil
}

func parse(body []byte) (Event, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return Event{}, err
	}
	for _, key := range []string{"Type", "Event", "detail-type", "source"} {
		if raw, ok := obj[key]; ok && obj.str(key) == "" && string(bytes.TrimSpace(raw)) != `""` {
			return Event{}, fmt.Errorf("member %q is not a string", key)
		}
	}
	return parseObject(body, obj, false)
}

// parseObject reads the body, or the Message of an SNS notification when viaSNS (which is not unwrapped
// again), by the shape its members give it. It fails when a member that tells the kind is spelled in other
// letter case than AWS writes it (checkKindMembers), and when the members give more than one shape.
func parseObject(body []byte, obj object, viaSNS bool) (Event, error) {
	if err := checkKindMembers(obj); err != nil {
		return Event{}, err
	}
	shapes := shapesOf(obj, viaSNS)
	if len(shapes) > 1 {
		names := make([]string, len(shapes))
		for i, s := range shapes {
			names[i] = s.describe(obj)
		}
		return Event{}, fmt.Errorf("the message has the members of %s: contradictory, so the agent reads it as none of them",
			strings.Join(names, " and of "))
	}
	envelope := EnvelopeDirect
	if viaSNS {
		envelope = EnvelopeSNS
	}
	if len(shapes) == 1 {
		switch shapes[0] {
		case shapeSNS:
			if !obj.has("TopicArn") {
				return Event{}, errors.New("SNS notification without TopicArn")
			}
			return parseSNS(body)
		case shapeEventBridge:
			bridge := EnvelopeEventBridge
			if viaSNS {
				bridge = EnvelopeSNSBridge
			}
			return parseEventBridge(body, bridge)
		case shapeHook:
			return parseHookMessage(body, envelope)
		case shapeAutoScaling:
			return parseAutoScalingNotification(body, envelope)
		case shapeAMIAnnouncement:
			return amiAnnouncement(), nil
		}
	}
	reason := "JSON object of no kind the agent knows (not an SNS notification, an EventBridge event or an Auto Scaling message); the agent does not act on it"
	if viaSNS {
		reason = "SNS message that is a JSON object of no kind the agent knows; the agent does not act on it"
	}
	return Event{Kind: KindUnknown, Envelope: envelope, Reason: reason}, nil
}

// shape is a kind of message as the members of an object tell it, before the object is decoded.
type shape int

const (
	shapeSNS             shape = iota + 1 // "Type":"Notification": an SNS notification (the body only, not an SNS Message)
	shapeEventBridge                      // detail-type and source: an EventBridge event
	shapeHook                             // LifecycleActionToken, LifecycleTransition or LifecycleHookName: a lifecycle hook message
	shapeAutoScaling                      // "Event":"autoscaling:...": an Auto Scaling notification
	shapeAMIAnnouncement                  // ECSAmis, in an SNS Message: the ECS-optimized AMI update announcement
)

// hookMembers are the members that make an object a lifecycle hook message; Auto Scaling's other messages
// carry none of them.
var hookMembers = []string{"LifecycleActionToken", "LifecycleTransition", "LifecycleHookName"}

// shapesOf returns every shape obj's members give it, in the order Parse tries them. Auto Scaling, SNS and
// EventBridge each write one shape a message: two are a contradiction.
func shapesOf(obj object, viaSNS bool) []shape {
	var shapes []shape
	if !viaSNS && obj.str("Type") == "Notification" {
		shapes = append(shapes, shapeSNS)
	}
	if obj.has("detail-type") && obj.has("source") {
		shapes = append(shapes, shapeEventBridge)
	}
	for _, m := range hookMembers {
		if obj.has(m) {
			shapes = append(shapes, shapeHook)
			break
		}
	}
	if strings.HasPrefix(obj.str("Event"), "autoscaling:") {
		shapes = append(shapes, shapeAutoScaling)
	}
	if viaSNS && obj.has("ECSAmis") {
		shapes = append(shapes, shapeAMIAnnouncement)
	}
	return shapes
}

// describe names the shape and the members of obj that give it, for an error.
func (s shape) describe(obj object) string {
	switch s {
	case shapeSNS:
		return `an SNS notification ("Type":"Notification")`
	case shapeEventBridge:
		return "an EventBridge event (detail-type and source)"
	case shapeHook:
		var have []string
		for _, m := range hookMembers {
			if obj.has(m) {
				have = append(have, m)
			}
		}
		return "a lifecycle action (" + strings.Join(have, ", ") + ")"
	case shapeAutoScaling:
		return fmt.Sprintf("an Auto Scaling notification (\"Event\":%q)", obj.str("Event"))
	case shapeAMIAnnouncement:
		return "the ECS-optimized AMI update announcement (ECSAmis)"
	}
	return fmt.Sprintf("shape %d", int(s))
}

// awsOnlyMembers are members that tell a message's kind and that only AWS's messages carry (folded with
// foldName). kindMembers adds the members that also tell a kind but are ordinary words other senders use in
// any letter case ({"type":"order","source":"shop"}).
var (
	awsOnlyMembers = foldedSet("TopicArn", "detail-type", "LifecycleActionToken", "LifecycleTransition", "LifecycleHookName", "ECSAmis")
	kindMembers    = foldedSet("Type", "Event", "source")
)

func foldedSet(names ...string) map[string]string {
	set := make(map[string]string, len(names))
	for _, n := range names {
		set[foldName(n)] = n
	}
	return set
}

// checkKindMembers fails when obj names a member that tells a kind in other letter case than AWS writes it
// ("lifecycleActionToken" for LifecycleActionToken): encoding/json reads such a member as the field it
// folds to, while the kind is told by the exact name, so the message would be read as one kind by its
// decoder and as another, or as none (ignored and deleted), by Parse. Auto Scaling, SNS and EventBridge
// spell their members one way; a sender that spells them otherwise is broken, and its message is malformed
// (the dead-letter queue keeps it) rather than guessed at. A member of kindMembers in other letter case is
// malformed only beside a member of awsOnlyMembers in any letter case: alone it is another sender's word.
func checkKindMembers(obj object) error {
	keys := make([]string, 0, len(obj))
	aws := false
	for k := range obj {
		keys = append(keys, k)
		if _, ok := awsOnlyMembers[foldName(k)]; ok {
			aws = true
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		want, ok := awsOnlyMembers[foldName(k)]
		if !ok && aws {
			want, ok = kindMembers[foldName(k)]
		}
		if ok && k != want {
			return fmt.Errorf("member %q: AWS spells it %q, and the agent reads no member that tells a message's kind by another spelling", k, want)
		}
	}
	return nil
}

// foldName folds a member name as encoding/json does when it matches a member to a struct field: ASCII
// letters to upper case, any other rune to the smallest rune of its Unicode simple-fold orbit. Two names fold
// alike exactly when encoding/json reads them as the same field: "EC2InstanceID" and "EC2InstanceId", and
// also "ſ" (U+017F) and "s", "K" (U+212A, Kelvin sign) and "k".
func foldName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, r := range name {
		switch {
		case 'a' <= r && r <= 'z':
			r -= 'a' - 'A'
		case r >= utf8.RuneSelf:
			for {
				next := unicode.SimpleFold(r)
				if next <= r {
					r = next
					break
				}
				r = next
			}
		}
		b.WriteRune(r)
	}
	return b.String()
}

// decodeObject checks that body is one JSON object and returns its members.
func decodeObject(body []byte) (object, error) {
	body = bytes.Trim(body, " \t\r\n")
	if len(body) == 0 {
		return nil, errors.New("empty body")
	}
	var obj object
	if err := json.Unmarshal(body, &obj); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field == "" {
			return nil, fmt.Errorf("JSON %s, not an object", typeErr.Value)
		}
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	if obj == nil {
		return nil, errors.New("JSON null, not an object")
	}
	if err := checkDuplicateKeys(body); err != nil {
		return nil, err
	}
	return obj, nil
}

// parseTime reads an RFC 3339 timestamp with or without fractional seconds ("2024-01-13T00:12:37Z",
// "2022-12-10T12:52:08.814Z"). An empty string is the zero time.
func parseTime(field, s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q is not an RFC 3339 time", field, s)
	}
	return t, nil
}

// arnRegionAccount returns the region and account of an ARN
// ("arn:aws:sns:us-east-1:111122223333:topic" -> "us-east-1", "111122223333"), or "" for anything else.
func arnRegionAccount(arn string) (region, account string) {
	parts := strings.SplitN(arn, ":", 6)
	if len(parts) != 6 || parts[0] != "arn" {
		return "", ""
	}
	return parts[3], parts[4]
}

// eventBridgeEvent is the envelope of every EventBridge event ("Amazon EventBridge User Guide: Amazon
// EventBridge events"); detail depends on (source, detail-type).
type eventBridgeEvent struct {
	Version    string          `json:"version"`
	ID         string          `json:"id"`
	DetailType string          `json:"detail-type"`
	Source     string          `json:"source"`
	Account    string          `json:"account"`
	Time       string          `json:"time"`
	Region     string          `json:"region"`
	Resources  []string        `json:"resources"`
	Detail     json.RawMessage `json:"detail"`
}

// eventBridgeKey selects the converter for an EventBridge event.
type eventBridgeKey struct{ source, detailType string }

// eventBridgeConverter fills the kind-specific fields of ev from the event's detail (a JSON object). It
// returns an error when the detail lacks what the kind needs.
type eventBridgeConverter func(ev *Event, detail json.RawMessage) error

// eventBridgeKinds maps (source, detail-type) to the converter for that kind. Pairs not listed are
// KindUnknown (unknownEventBridge). The ignored pairs are listed so that their Reason says what they are.
var eventBridgeKinds = map[eventBridgeKey]eventBridgeConverter{
	{"aws.ssm", "Parameter Store Change"}:                                       parameterChange,
	{"aws.events", "Scheduled Event"}:                                           scheduledTick,
	{"aws.autoscaling", detailTypeLaunchAction}:                                 lifecycleFromEventBridge,
	{"aws.autoscaling", detailTypeTerminateAction}:                              lifecycleFromEventBridge,
	{"aws.ecs", "ECS Container Instance State Change"}:                          containerInstanceChange,
	{"aws.autoscaling", "EC2 Instance Launch Successful"}:                       launchResult,
	{"aws.autoscaling", "EC2 Instance Launch Unsuccessful"}:                     launchResult,
	{"aws.autoscaling", "EC2 Instance Terminate Successful"}:                    launchResult,
	{"aws.autoscaling", "EC2 Instance Terminate Unsuccessful"}:                  launchResult,
	{"aws.ec2", "EC2 Instance State-change Notification"}:                       instanceStateChange,
	{"aws.autoscaling", "EC2 Auto Scaling Instance Refresh Checkpoint Reached"}: ignored(reasonRefreshCheckpoint),
	{OperatorSource, OperatorDetailType}:                                        operatorWakeUp,
}

// parseEventBridge reads an EventBridge event delivered by envelope (EnvelopeEventBridge or
// EnvelopeSNSBridge).
func parseEventBridge(body []byte, envelope Envelope) (Event, error) {
	var e eventBridgeEvent
	if err := json.Unmarshal(body, &e); err != nil {
		return Event{}, fmt.Errorf("decoding EventBridge event: %w", err)
	}
	detail := bytes.Trim(e.Detail, " \t\r\n")
	switch {
	case len(detail) == 0:
		return Event{}, fmt.Errorf("EventBridge event %s (%s from %s) has no detail", e.ID, e.DetailType, e.Source)
	case detail[0] != '{':
		return Event{}, fmt.Errorf("EventBridge event %s (%s from %s): detail is not a JSON object", e.ID, e.DetailType, e.Source)
	}
	t, err := parseTime("EventBridge event time", e.Time)
	if err != nil {
		return Event{}, err
	}
	ev := Event{
		Envelope:   envelope,
		ID:         e.ID,
		Source:     e.Source,
		DetailType: e.DetailType,
		Account:    e.Account,
		Region:     e.Region,
		Time:       t,
	}
	convert, ok := eventBridgeKinds[eventBridgeKey{e.Source, e.DetailType}]
	if !ok {
		convert = unknownEventBridge
	}
	if err := convert(&ev, detail); err != nil {
		return Event{}, fmt.Errorf("EventBridge event %s (%s from %s): %w", e.ID, e.DetailType, e.Source, err)
	}
	return ev, nil
}
