package events

import (
	"encoding/json"
	"errors"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// KindWakeUp is an EventBridge event that may end a wait of a rollout: a replacement launched (or failed to),
// a container instance changed state. It is a claim, like every message: it only makes the agent look again
// at the targets it names — a re-read of AWS, as the next poll would do — and never causes an effect by
// itself (docs/events.md, "Wake-up events").
const KindWakeUp Kind = "WakeUp"

// WakeUp names what a wake-up event is about. Group is set for Auto Scaling events, Cluster for ECS events;
// InstanceID is the EC2 instance when the event names one.
type WakeUp struct {
	Group      string `json:"group,omitempty"`
	Cluster    string `json:"cluster,omitempty"` // the cluster's name, from detail.clusterArn
	InstanceID string `json:"instanceId,omitempty"`
	// Status is the container instance's status (ACTIVE, DRAINING, ...) or the launch's StatusCode.
	Status string `json:"status,omitempty"`
	// TasksLeft is, for an ECS Container Instance State Change, the container instance's
	// runningTasksCount + pendingTasksCount as the event reports them (its detail is the ContainerInstance
	// object of DescribeContainerInstances); nil when the event carries neither count or is of another kind.
	// A task placed or stopped on a container instance sends such an event
	// (https://docs.aws.amazon.com/AmazonECS/latest/developerguide/ecs_container_instance_events.html).
	TasksLeft *int32 `json:"tasksLeft,omitempty"`
}

// launchResult converts the results of Auto Scaling's scaling activities: "EC2 Instance Launch Successful",
// "EC2 Instance Launch Unsuccessful", "EC2 Instance Terminate Successful" and "EC2 Instance Terminate
// Unsuccessful" (source aws.autoscaling; Amazon EC2 Auto Scaling User Guide, "Amazon EC2 Auto Scaling event
// reference": successful and unsuccessful scaling events; the four share one detail shape). Samples:
// testdata/instance-launch-successful.json, testdata/instance-launch-unsuccessful.json,
// testdata/instance-terminate-successful.json, testdata/instance-terminate-unsuccessful.json (detail
// shortened):
//
//	{"version":"0","id":"...","detail-type":"EC2 Instance Launch Unsuccessful","source":"aws.autoscaling",
//	 "account":"111122223333","time":"2024-01-13T00:12:37Z","region":"us-west-2","resources":[...],
//	 "detail":{"StatusCode":"Failed","AutoScalingGroupName":"my-auto-scaling-group",
//	           "EC2InstanceId":"i-1234567890abcdef0","StatusMessage":"...",...}}
//
// A detail without AutoScalingGroupName names no target: an error (the message is malformed).
func launchResult(ev *Event, detail json.RawMessage) error {
	var d struct {
		Group      string `json:"AutoScalingGroupName"`
		InstanceID string `json:"EC2InstanceId"`
		StatusCode string `json:"StatusCode"`
	}
	if err := json.Unmarshal(detail, &d); err != nil {
		return err
	}
	if d.Group == "" {
		return errors.New("detail.AutoScalingGroupName is missing")
	}
	ev.Kind, ev.Group = KindWakeUp, d.Group
	ev.Wake = &WakeUp{Group: d.Group, InstanceID: d.InstanceID, Status: d.StatusCode}
	return nil
}

// containerInstanceChange converts "ECS Container Instance State Change" (source aws.ecs; Amazon ECS
// Developer Guide, "Amazon ECS container instance state change events"). Sample
// (testdata/ecs-container-instance-state-change.json, detail shortened):
//
//	{"version":"0","id":"8952ba83-...","detail-type":"ECS Container Instance State Change","source":"aws.ecs",
//	 "account":"111122223333","time":"2016-12-06T16:41:06Z","region":"us-east-1","resources":[...],
//	 "detail":{"agentConnected":true,"clusterArn":"arn:aws:ecs:us-east-1:111122223333:cluster/default",
//	           "ec2InstanceId":"i-f3a8506b","status":"ACTIVE",...}}
//
// A detail without a clusterArn of the form arn:...:cluster/NAME names no target: an error.
func containerInstanceChange(ev *Event, detail json.RawMessage) error {
	var d struct {
		ClusterARN string `json:"clusterArn"`
		InstanceID string `json:"ec2InstanceId"`
		Status     string `json:"status"`
		Running    *int32 `json:"runningTasksCount"`
		Pending    *int32 `json:"pendingTasksCount"`
	}
	if err := json.Unmarshal(detail, &d); err != nil {
		return err
	}
	_, name, ok := strings.Cut(d.ClusterARN, ":cluster/")
	if !ok || name == "" || !strings.HasPrefix(d.ClusterARN, "arn:") {
		return errors.New("detail.clusterArn is missing or not a cluster ARN")
	}
	ev.Kind = KindWakeUp
	ev.Wake = &WakeUp{Cluster: name, InstanceID: d.InstanceID, Status: d.Status}
	if d.Running != nil || d.Pending != nil {
		left := aws.ToInt32(d.Running) + aws.ToInt32(d.Pending)
		ev.Wake.TasksLeft = &left
	}
	return nil
}

// instanceStateChange converts "EC2 Instance State-change Notification" (source aws.ec2; Amazon EC2 User
// Guide, "State change events for Amazon EC2 instances"). Sample (testdata/ec2-instance-state-change-pending.json,
// the guide's own; testdata/ec2-instance-state-change-shutting-down.json is the same event for the
// shutting-down state the stack's rule delivers):
//
//	{"id":"7bf73129-1428-4cd3-a780-95db273d1602","detail-type":"EC2 Instance State-change Notification",
//	 "source":"aws.ec2","account":"123456789012","time":"2021-11-11T21:29:54Z","region":"us-east-1",
//	 "resources":["arn:aws:ec2:us-east-1:123456789012:instance/i-1234567890abcdef0"],
//	 "detail":{"instance-id":"i-1234567890abcdef0","state":"pending"}}
//
// The event names only the instance: the agent wakes the managed group that listed it at the last look.
// A detail without an instance id of an instance id's shape names no target: an error.
func instanceStateChange(ev *Event, detail json.RawMessage) error {
	var d struct {
		InstanceID string `json:"instance-id"`
		State      string `json:"state"`
	}
	if err := json.Unmarshal(detail, &d); err != nil {
		return err
	}
	if !instanceIDPattern.MatchString(d.InstanceID) {
		return errors.New("detail.instance-id is missing or not an instance id")
	}
	ev.Kind = KindWakeUp
	ev.Wake = &WakeUp{InstanceID: d.InstanceID, Status: d.State}
	return nil
}
