package events

import (
	"encoding/json"
	"fmt"
)

// eventTestNotification is the "Event" of the message a lifecycle hook (or a group's notification
// configuration) sends to its target when the target is set.
const eventTestNotification = "autoscaling:TEST_NOTIFICATION"

// autoScalingNotification is an Auto Scaling message that carries an "Event" member: the test notification,
// or a scaling notification (autoscaling:EC2_INSTANCE_LAUNCH, ..._TERMINATE, ..._LAUNCH_ERROR, ...).
type autoScalingNotification struct {
	AccountID            string `json:"AccountId"`
	RequestID            string `json:"RequestId"`
	AutoScalingGroupARN  string `json:"AutoScalingGroupARN"`
	AutoScalingGroupName string `json:"AutoScalingGroupName"`
	Service              string `json:"Service"`
	Event                string `json:"Event"`
	Time                 string `json:"Time"`
}

// parseAutoScalingNotification converts an Auto Scaling message with an "Event" member. The test
// notification becomes KindTestNotification: Auto Scaling sends it to a lifecycle hook's notification target
// when the hook is created or its target changes, with no instance and no token, and nothing is to be done
// (field case C1). Shape from "Amazon EC2 Auto Scaling User Guide: Configure a notification target for
// lifecycle notifications" (Test notification message example) and the PutLifecycleHook API reference
// (NotificationTargetARN: test messages contain "Event": "autoscaling:TEST_NOTIFICATION").
//
// Sample (testdata/asg-hook-test-notification.json):
//
//	{"AccountId":"111122223333","RequestId":"4781ed87-354a-11e9-9f76-cb62a7958e88",
//	 "AutoScalingGroupARN":"arn:aws:autoscaling:us-west-2:111122223333:autoScalingGroup:3c1d7d91-2140-40b1-a8b1-c9f46e4dff13:autoScalingGroupName/ecs-default-cluster-Sandbox-EcsClusterAutoScaleGroupSandbox-CLJKMQ0V93DL",
//	 "AutoScalingGroupName":"ecs-default-cluster-Sandbox-EcsClusterAutoScaleGroupSandbox-CLJKMQ0V93DL",
//	 "Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2019-02-20T20:01:15.747Z"}
//
// Any other "Event" (the scaling notifications of "Amazon EC2 Auto Scaling User Guide: Amazon SNS
// notification options for Amazon EC2 Auto Scaling") becomes KindUnknown: the agent acts on lifecycle actions,
// not on scaling notifications.
func parseAutoScalingNotification(body []byte, envelope Envelope) (Event, error) {
	var n autoScalingNotification
	if err := json.Unmarshal(body, &n); err != nil {
		return Event{}, fmt.Errorf("decoding Auto Scaling notification: %w", err)
	}
	t, err := parseTime("Auto Scaling notification Time", n.Time)
	if err != nil {
		return Event{}, err
	}
	region, _ := arnRegionAccount(n.AutoScalingGroupARN)
	ev := Event{
		Kind:     KindTestNotification,
		Envelope: envelope,
		ID:       n.RequestID,
		Source:   "aws.autoscaling",
		Account:  n.AccountID,
		Region:   region,
		Time:     t,
		Group:    n.AutoScalingGroupName,
		Reason:   "Auto Scaling test notification, sent when a lifecycle hook's notification target is set; nothing to do",
	}
	if n.Event != eventTestNotification {
		ev.Kind = KindUnknown
		ev.Reason = fmt.Sprintf("Auto Scaling notification %s; the agent acts on lifecycle actions only and does not act on it", n.Event)
	}
	return ev, nil
}
