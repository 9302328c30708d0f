package events

import (
	"encoding/json"
	"fmt"
)

// Reasons for the EventBridge events that reach the queue (a broad rule, a shared queue) but that the agent
// does not act on.
const (
	// "Amazon ECS Developer Guide: Amazon ECS container instance state change events". Sample
	// (testdata/ecs-container-instance-state-change.json, detail shortened):
	//
	//	{"version":"0","id":"8952ba83-7be2-4ab5-9c32-6687532d15a2","detail-type":"ECS Container Instance State Change",
	//	 "source":"aws.ecs","account":"111122223333","time":"2016-12-06T16:41:06Z","region":"us-east-1",
	//	 "resources":["arn:aws:ecs:us-east-1:111122223333:container-instance/b54a2a04-046f-4331-9d74-3f6d7f6ca315"],
	//	 "detail":{"agentConnected":true,"clusterArn":"arn:aws:ecs:us-east-1:111122223333:cluster/default",
	//	           "containerInstanceArn":"arn:aws:ecs:...","ec2InstanceId":"i-f3a8506b","status":"ACTIVE",
	//	           "version":14801,...}}
	reasonContainerInstanceStateChange = "ECS Container Instance State Change: the agent reads container instance state from the ECS API while it drains or waits for health, and does not act on this event"

	// "Amazon EC2 Auto Scaling User Guide: Amazon EC2 Auto Scaling event reference" (Successful instance launch
	// events). Sample (testdata/instance-launch-successful.json, detail shortened):
	//
	//	{"version":"0","id":"12345678-1234-1234-1234-123456789012","detail-type":"EC2 Instance Launch Successful",
	//	 "source":"aws.autoscaling","account":"111122223333","time":"2024-01-13T00:12:37Z","region":"us-west-2",
	//	 "resources":[...],"detail":{"StatusCode":"InProgress","AutoScalingGroupName":"my-auto-scaling-group",
	//	 "ActivityId":"87654321-4321-4321-4321-210987654321","EC2InstanceId":"i-1234567890abcdef0",...}}
	reasonLaunchSuccessful = "EC2 Instance Launch Successful: the agent waits for replacements by their health in the cluster (launch lifecycle action or polling), and does not act on this event"

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
