package events

import (
	"encoding/json"
	"fmt"
)

// Reasons for the EventBridge events that reach the queue (a broad rule, a shared queue) but that the agent
// does not act on.
const (
	// "Amazon EC2 Auto Scaling User Guide: Amazon EC2 Auto Scaling event reference" (Instance refresh events).
	// Sample (testdata/instance-refresh-checkpoint.json):
	//
	//	{"version":"0","id":"12345678-1234-1234-1234-123456789012",
	//	 "detail-type":"EC2 Auto Scaling Instance Refresh Checkpoint Reached","source":"aws.autoscaling",
	//	 "account":"111122223333","time":"2024-01-13T00:12:37Z","region":"us-west-2","resources":[...],
	//	 "detail":{"InstanceRefreshId":"ab00cf8f-9126-4f3c-8010-dbb8cad6fb86",
	//	           "AutoScalingGroupName":"my-auto-scaling-group","CheckpointPercentage":"50","CheckpointDelay":"300"}}
	reasonRefreshCheckpoint = "EC2 Auto Scaling Instance Refresh Checkpoint Reached: the agent does not run instance refreshes and does not act on this event; the refresh's own terminate lifecycle actions are handled as they come"
)

// ignored returns the converter for a known EventBridge event the agent does not act on: KindUnknown with
// reason, and Group when the detail names one.
func ignored(reason string) eventBridgeConverter {
	return func(ev *Event, detail json.RawMessage) error {
		ev.Kind = KindUnknown
		ev.Reason = reason
		ev.Group = detailGroup(detail)
		return nil
	}
}

// unknownEventBridge converts an EventBridge event whose (source, detail-type) is not in eventBridgeKinds:
// KindUnknown, never an error, so that a broad rule or a shared queue cannot fill the dead-letter queue.
func unknownEventBridge(ev *Event, detail json.RawMessage) error {
	ev.Kind = KindUnknown
	ev.Reason = fmt.Sprintf("EventBridge event %q from %q; the agent does not act on it", ev.DetailType, ev.Source)
	ev.Group = detailGroup(detail)
	return nil
}

// detailGroup returns detail.AutoScalingGroupName when it is a string, else "". Only for events the agent
// ignores: a detail of another shape is not an error there.
func detailGroup(detail json.RawMessage) string {
	var d struct {
		AutoScalingGroupName string `json:"AutoScalingGroupName"`
	}
	if json.Unmarshal(detail, &d) != nil {
		return ""
	}
	return d.AutoScalingGroupName
}
