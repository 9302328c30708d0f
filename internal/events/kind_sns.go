package events

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// snsNotification is the JSON an SNS topic delivers to a subscribed SQS queue when raw message delivery is
// off ("Amazon SNS Developer Guide: Amazon SNS message and JSON formats", HTTP/HTTPS notification JSON format,
// and "Fanout Amazon SNS notifications to Amazon SQS queues").
type snsNotification struct {
	Type      string  `json:"Type"`
	MessageID string  `json:"MessageId"`
	TopicArn  string  `json:"TopicArn"`
	Subject   string  `json:"Subject"`
	Message   *string `json:"Message"`
	Timestamp string  `json:"Timestamp"`
}

// parseSNS unwraps an SNS notification and reads its Message: an EventBridge event (EnvelopeSNSBridge), a
// lifecycle hook message or Auto Scaling notification (EnvelopeSNS), the ECS-optimized AMI update announcement
// (kind_ami_announcement.go), or anything else, which is KindUnknown. The Message is a string; when it holds
// JSON, that JSON is escaped inside it.
//
// Sample (testdata/sns-envelope-generic.json, a text message):
//
//	{"Type":"Notification","MessageId":"12345678-be92-513a-a017-1234567890",
//	 "TopicArn":"arn:aws:sns:us-east-1:111122223333:patterns-sns-to-sqs-MySnsTopic-123456789012",
//	 "Subject":"testSubject","Message":"testMessage","Timestamp":"2021-02-10T15:51:48.748Z",
//	 "SignatureVersion":"1","Signature":"FMCqEXAMPLEGjIUG6K65MKpA==","SigningCertURL":"https://sns.us-east-1.amazonaws.com/...",
//	 "UnsubscribeURL":"https://sns.us-east-1.amazonaws.com/?Action=Unsubscribe&SubscriptionArn=..."}
//
// A lifecycle hook whose target is a topic (testdata/sns-wrapped-asg-hook-terminating.json):
//
//	{"Type":"Notification","MessageId":"0c2b4f6e-8a1d-5e3f-9b7c-2d4e6f8a0b1c",
//	 "TopicArn":"arn:aws:sns:us-east-1:111122223333:asg-lifecycle",
//	 "Subject":"Auto Scaling:  Lifecycle action 'TERMINATING' for instance i-0a1b2c3d4e5f60718 in progress.",
//	 "Message":"{\"Origin\": \"AutoScalingGroup\", \"LifecycleHookName\": \"patch-agent-drain\", ...,
//	            \"LifecycleActionToken\": \"5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13\", ...}",
//	 "Timestamp":"2024-03-04T09:15:31.250Z", ...}
//
// The ID is the EventBridge id of a wrapped event, else the SNS MessageId. Time, Account and Region come from
// the wrapped message when it has them, else from Timestamp and TopicArn. The signature is not verified: the
// queue policy decides who may send.
//
// It fails when Message is missing or not a string, and when the wrapped message is a malformed kind.
func parseSNS(body []byte) (Event, error) {
	var n snsNotification
	if err := json.Unmarshal(body, &n); err != nil {
		return Event{}, fmt.Errorf("decoding SNS notification: %w", err)
	}
	if n.Message == nil {
		return Event{}, fmt.Errorf("SNS notification %s from topic %s has no Message", n.MessageID, n.TopicArn)
	}
	ev, err := parseSNSMessage(*n.Message, n.Subject)
	if err != nil {
		return Event{}, fmt.Errorf("SNS notification %s from topic %s: %w", n.MessageID, n.TopicArn, err)
	}
	ts, err := parseTime("SNS Timestamp", n.Timestamp)
	if err != nil {
		return Event{}, err
	}
	if (ev.Envelope != EnvelopeSNSBridge || ev.ID == "") && n.MessageID != "" {
		ev.ID = n.MessageID
	}
	if ev.Time.IsZero() {
		ev.Time = ts
	}
	region, account := arnRegionAccount(n.TopicArn)
	if ev.Region == "" {
		ev.Region = region
	}
	if ev.Account == "" {
		ev.Account = account
	}
	ev.Topic = n.TopicArn
	return ev, nil
}

// parseSNSMessage reads the Message of an SNS notification.
func parseSNSMessage(msg, subject string) (Event, error) {
	body := bytes.Trim([]byte(msg), " \t\r\n")
	if len(body) > 0 && body[0] == '{' {
		var obj object
		if err := json.Unmarshal(body, &obj); err != nil {
			// A Message that starts like a JSON object but does not parse is a broken message, not text.
			return Event{}, fmt.Errorf("Message looks like JSON but does not parse: %w", err)
		}
		if err := checkDuplicateKeys(body); err != nil {
			return Event{}, fmt.Errorf("Message: %w", err)
		}
		return parseObject(body, obj, true)
	}
	return Event{
		Kind:     KindUnknown,
		Envelope: EnvelopeSNS,
		Reason:   fmt.Sprintf("SNS text message (subject %q); the agent does not act on it", truncate(subject, 80)),
	}, nil
}

// truncate cuts s to at most n bytes, at a rune boundary, marking the cut with "...".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "..."
}
