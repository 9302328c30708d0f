package events

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"
)

// validKinds are the kinds Parse may return.
var validKinds = map[Kind]bool{
	KindParameterChange:  true,
	KindScheduledTick:    true,
	KindLifecycleAction:  true,
	KindTestNotification: true,
	KindAMIAnnouncement:  true,
	KindWakeUp:           true,
	KindOperatorWakeUp:   true,
	KindUnknown:          true,
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	body, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return body
}

// fixtureFiles lists every message in testdata (the fuzz corpus under testdata/fuzz is not a message).
func fixtureFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	return files
}

func TestParseFixtures(t *testing.T) {
	tests := []struct {
		name      string
		file      string
		kind      Kind
		envelope  Envelope
		id        string
		group     string
		parameter *ParameterChange
		lifecycle *LifecycleAction
		check     func(t *testing.T, ev Event) // further assertions, when the case needs them
	}{
		{
			name:     "direct launching hook is a launch lifecycle action",
			file:     "asg-hook-direct-launching.json",
			kind:     KindLifecycleAction,
			envelope: EnvelopeDirect,
			id:       "f6e613f0-5d34-4aef-040d-19b78b000e23",
			group:    "CloudFormed-ASG",
			lifecycle: &LifecycleAction{
				GroupName:   "CloudFormed-ASG",
				HookName:    "ASGLifecycleHookNotification-Launching",
				InstanceID:  "i-0faa113d8c63b3f60",
				Token:       "c1069c83-a3d9-4a6a-9a08-89a361c171e2",
				Transition:  TransitionLaunching,
				Origin:      "EC2",
				Destination: "AutoScalingGroup",
			},
		},
		{
			name:     "direct terminating hook keeps its notification metadata",
			file:     "asg-hook-direct-terminating.json",
			kind:     KindLifecycleAction,
			envelope: EnvelopeDirect,
			id:       "2b9a61c4-7e0d-4c1e-9f4a-1c0a5d3e7b21",
			group:    "ecs-prod-cluster-asg",
			lifecycle: &LifecycleAction{
				GroupName:            "ecs-prod-cluster-asg",
				HookName:             "patch-agent-drain",
				InstanceID:           "i-0a1b2c3d4e5f60718",
				Token:                "5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13",
				Transition:           TransitionTerminating,
				Origin:               "AutoScalingGroup",
				Destination:          "EC2",
				NotificationMetadata: `{"cluster":"prod"}`,
			},
		},
		{
			name:     "C1 hook test notification is recognised and ignored, never a lifecycle action",
			file:     "asg-hook-test-notification.json",
			kind:     KindTestNotification,
			envelope: EnvelopeDirect,
			id:       "4781ed87-354a-11e9-9f76-cb62a7958e88",
			group:    "ecs-default-cluster-Sandbox-EcsClusterAutoScaleGroupSandbox-CLJKMQ0V93DL",
			check: func(t *testing.T, ev Event) {
				require.Contains(t, ev.Reason, "test notification")
			},
		},
		{
			name:     "ECS container instance state change wakes the groups of its cluster",
			file:     "ecs-container-instance-state-change.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "8952ba83-7be2-4ab5-9c32-6687532d15a2",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Cluster: "default", InstanceID: "i-f3a8506b", Status: "ACTIVE"}, ev.Wake)
				require.Empty(t, ev.Group, "the event names a cluster, not a group")
			},
		},
		{
			name:     "EventBridge launch lifecycle action",
			file:     "eventbridge-lifecycle-launch.json",
			kind:     KindLifecycleAction,
			envelope: EnvelopeEventBridge,
			id:       "12345678-1234-1234-1234-123456789012",
			group:    "my-asg",
			lifecycle: &LifecycleAction{
				GroupName:            "my-asg",
				HookName:             "my-lifecycle-hook",
				InstanceID:           "i-1234567890abcdef0",
				Token:                "87654321-4321-4321-4321-210987654321",
				Transition:           TransitionLaunching,
				Origin:               "EC2",
				Destination:          "AutoScalingGroup",
				NotificationMetadata: "additional-info",
			},
		},
		{
			name:     "C14 ReplaceRootVolume terminate is drained but instance does not leave",
			file:     "eventbridge-lifecycle-terminate-replace-root-volume.json",
			kind:     KindLifecycleAction,
			envelope: EnvelopeEventBridge,
			id:       "12345678-1234-1234-1234-123456789012",
			group:    "my-asg",
			lifecycle: &LifecycleAction{
				GroupName:            "my-asg",
				HookName:             "my-terminate-lifecycle-hook",
				InstanceID:           "i-1234567890abcdef0",
				Token:                "71514b9d-6a40-4b26-8523-05e7eEXAMPLE",
				Transition:           TransitionTerminating,
				Action:               ActionReplaceRootVolume,
				Origin:               "AutoScalingGroup",
				Destination:          "AutoScalingGroup",
				NotificationMetadata: "additional-info",
			},
			check: func(t *testing.T, ev Event) {
				require.True(t, ev.Lifecycle.Terminating(), "drained like any terminate action")
				require.False(t, ev.Lifecycle.InstanceLeaves(), "the instance comes back with a new root volume")
			},
		},
		{
			name:     "EventBridge terminate lifecycle action",
			file:     "eventbridge-lifecycle-terminate.json",
			kind:     KindLifecycleAction,
			envelope: EnvelopeEventBridge,
			id:       "66f9eb1a-5b2f-b2e0-2177-1ab6eaa34884",
			group:    "eks-workers-a",
			lifecycle: &LifecycleAction{
				GroupName:   "eks-workers-a",
				HookName:    "patch-agent-drain",
				InstanceID:  "i-0c5e2a7b9d1f34e86",
				Token:       "be2184df-afe7-4db9-a4a4-e6d6a72210d1",
				Transition:  TransitionTerminating,
				Origin:      "AutoScalingGroup",
				Destination: "EC2",
			},
			check: func(t *testing.T, ev Event) {
				require.True(t, ev.Lifecycle.InstanceLeaves())
			},
		},
		{
			name:     "operator wake-up names its group, action and sender",
			file:     "operator-wakeup-approve.json",
			kind:     KindOperatorWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "5f0c8a8e-3b7d-4c1a-9e2f-6d4b8a1c0e57",
			group:    "prod-ecs-asg",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &OperatorWakeUp{Action: OperatorApprove, Group: "prod-ecs-asg", Who: "arn:aws:sts::111122223333:assumed-role/ops/alice"}, ev.Operator)
				require.Nil(t, ev.Wake, "an operator wake-up is not an AWS wake-up event")
			},
		},
		{
			name:     "instance terminate successful wakes its group",
			file:     "instance-terminate-successful.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "12345678-1234-1234-1234-123456789012",
			group:    "my-auto-scaling-group",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Group: "my-auto-scaling-group", InstanceID: "i-1234567890abcdef0", Status: "InProgress"}, ev.Wake)
			},
		},
		{
			name:     "instance terminate unsuccessful wakes its group",
			file:     "instance-terminate-unsuccessful.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "9d8c7b6a-5f4e-4d3c-2b1a-0f9e8d7c6b5a",
			group:    "my-auto-scaling-group",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Group: "my-auto-scaling-group", InstanceID: "i-1234567890abcdef0", Status: "Failed"}, ev.Wake)
			},
		},
		{
			name:     "EC2 instance state change names only its instance",
			file:     "ec2-instance-state-change-pending.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "7bf73129-1428-4cd3-a780-95db273d1602",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{InstanceID: "i-1234567890abcdef0", Status: "pending"}, ev.Wake)
				require.Empty(t, ev.Group, "the event names an instance, not a group")
			},
		},
		{
			name:     "EC2 instance shutting down names its instance and state",
			file:     "ec2-instance-state-change-shutting-down.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "a1b2c3d4-5e6f-4a7b-8c9d-0e1f2a3b4c5d",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{InstanceID: "i-1234567890abcdef0", Status: "shutting-down"}, ev.Wake)
			},
		},
		{
			name:     "ECS container instance DRAINING wakes the groups of its cluster",
			file:     "ecs-container-instance-state-change-draining.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "5f2e8b3c-9a41-4d6e-b7c0-2e1f3a4b5c6d",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Cluster: "default", InstanceID: "i-f3a8506b", Status: "DRAINING"}, ev.Wake)
			},
		},
		{
			name:     "ECS container instance DRAINING with tasks left reports them",
			file:     "ecs-container-instance-draining-tasks-left.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "7a1c9e2b-3d4f-4a6b-8c0d-1e2f3a4b5c6e",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Cluster: "default", InstanceID: "i-f3a8506b", Status: "DRAINING", TasksLeft: aws.Int32(3)}, ev.Wake,
					"runningTasksCount 2 + pendingTasksCount 1")
			},
		},
		{
			name:     "ECS container instance registered wakes the groups of its cluster",
			file:     "ecs-container-instance-registered.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "0c4d2e6f-1a3b-4c5d-8e9f-a0b1c2d3e4f5",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Cluster: "default", InstanceID: "i-0b2c3d4e5f6a7b8c9", Status: "ACTIVE", TasksLeft: aws.Int32(0)}, ev.Wake)
			},
		},
		{
			name:     "instance launch successful wakes its group",
			file:     "instance-launch-successful.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "12345678-1234-1234-1234-123456789012",
			group:    "my-auto-scaling-group",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Group: "my-auto-scaling-group", InstanceID: "i-1234567890abcdef0", Status: "InProgress"}, ev.Wake)
			},
		},
		{
			name:     "instance launch unsuccessful wakes its group",
			file:     "instance-launch-unsuccessful.json",
			kind:     KindWakeUp,
			envelope: EnvelopeEventBridge,
			id:       "3e3c153a-8339-4e30-8c35-687ebef853fe",
			group:    "my-auto-scaling-group",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, &WakeUp{Group: "my-auto-scaling-group", InstanceID: "i-1234567890abcdef0", Status: "Failed"}, ev.Wake)
			},
		},
		{
			name:     "instance refresh checkpoint is ignored but names its group",
			file:     "instance-refresh-checkpoint.json",
			kind:     KindUnknown,
			envelope: EnvelopeEventBridge,
			id:       "12345678-1234-1234-1234-123456789012",
			group:    "my-auto-scaling-group",
		},
		{
			name:     "scheduled event is a tick",
			file:     "scheduled-event.json",
			kind:     KindScheduledTick,
			envelope: EnvelopeEventBridge,
			id:       "cdc73f9d-aea9-11e3-9d5a-835b769c0d9c",
		},
		{
			name:     "ECS-optimized AMI update through SNS is an announcement",
			file:     "sns-ecs-ami-update.json",
			kind:     KindAMIAnnouncement,
			envelope: EnvelopeSNS,
			id:       "163ab552-da6f-596f-9437-e79a17ccfcd0",
			check: func(t *testing.T, ev Event) {
				require.Equal(t, "arn:aws:sns:us-east-1:177427601217:ecs-optimized-amazon-ami-update", ev.Topic)
			},
		},
		{
			name:     "SNS text message is ignored",
			file:     "sns-envelope-generic.json",
			kind:     KindUnknown,
			envelope: EnvelopeSNS,
			id:       "12345678-be92-513a-a017-1234567890",
			check: func(t *testing.T, ev Event) {
				require.Contains(t, ev.Reason, "testSubject")
			},
		},
		{
			name:     "SNS-wrapped terminating hook is the same action with the SNS message id",
			file:     "sns-wrapped-asg-hook-terminating.json",
			kind:     KindLifecycleAction,
			envelope: EnvelopeSNS,
			id:       "0c2b4f6e-8a1d-5e3f-9b7c-2d4e6f8a0b1c",
			group:    "ecs-prod-cluster-asg",
			lifecycle: &LifecycleAction{
				GroupName:            "ecs-prod-cluster-asg",
				HookName:             "patch-agent-drain",
				InstanceID:           "i-0a1b2c3d4e5f60718",
				Token:                "5f0c9b7e-3a2d-4e8f-b1c6-7d9e0a4b2c13",
				Transition:           TransitionTerminating,
				Origin:               "AutoScalingGroup",
				Destination:          "EC2",
				NotificationMetadata: `{"cluster":"prod"}`,
			},
		},
		{
			name:      "Parameter Store Create",
			file:      "ssm-parameter-change-create.json",
			kind:      KindParameterChange,
			envelope:  EnvelopeEventBridge,
			id:        "6a7e4feb-b491-4cf7-a9f1-bf3703497718",
			parameter: &ParameterChange{Name: "MyExampleParameter", Operation: "Create", Type: "String"},
		},
		{
			name:      "Parameter Store Delete",
			file:      "ssm-parameter-change-delete.json",
			kind:      KindParameterChange,
			envelope:  EnvelopeEventBridge,
			id:        "80e9b391-6a9b-413c-839a-453b528053af",
			parameter: &ParameterChange{Name: "MyExampleParameter", Operation: "Delete", Type: "String"},
		},
		{
			name:     "Parameter Store Create that failed AMI validation keeps the exception",
			file:     "ssm-parameter-change-image-validation-failed.json",
			kind:     KindParameterChange,
			envelope: EnvelopeEventBridge,
			id:       "eed4a719-0fa4-6a49-80d8-8ac65EXAMPLE",
			parameter: &ParameterChange{
				Name:      "MyGoldenAMI",
				Operation: "Create",
				Type:      "String",
				DataType:  "aws:ec2:image",
				Exception: "Unable to Describe Resource",
			},
		},
		{
			name:      "Parameter Store Update of a hierarchical name keeps the leading slash",
			file:      "ssm-parameter-change-update-golden-ami.json",
			kind:      KindParameterChange,
			envelope:  EnvelopeEventBridge,
			id:        "9547ef2d-3b7e-4057-b6cb-5fdf09ee7c8f",
			parameter: &ParameterChange{Name: "/golden-ami/ecs/al2023", Operation: "Update", Type: "String"},
		},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		covered[tc.file] = true
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse(readTestdata(t, tc.file))
			require.NoError(t, err)
			require.Equal(t, tc.kind, ev.Kind)
			require.Equal(t, tc.envelope, ev.Envelope)
			require.Equal(t, tc.id, ev.ID)
			require.Equal(t, tc.group, ev.Group)
			require.Equal(t, tc.parameter, ev.Parameter)
			require.Equal(t, tc.lifecycle, ev.Lifecycle)
			if tc.check != nil {
				tc.check(t, ev)
			}
		})
	}
	for _, f := range fixtureFiles(t) {
		require.True(t, covered[filepath.Base(f)], "no row in TestParseFixtures for %s", f)
	}
}

// TestParseEveryTestdataFile covers fixtures added to testdata without a row in TestParseFixtures.
func TestParseEveryTestdataFile(t *testing.T) {
	for _, f := range fixtureFiles(t) {
		t.Run(filepath.Base(f), func(t *testing.T) {
			body, err := os.ReadFile(f)
			require.NoError(t, err)
			ev, err := Parse(body)
			require.NoError(t, err)
			require.True(t, validKinds[ev.Kind], "kind %q", ev.Kind)
			require.NotEmpty(t, ev.Envelope)
			require.NotEmpty(t, ev.ID, "every AWS payload carries an id")
			require.False(t, ev.Time.IsZero(), "every AWS payload carries a time")
		})
	}
}

func TestParseTime(t *testing.T) {
	tests := []struct {
		name string
		file string
		want time.Time
	}{
		{"EventBridge time without fractional seconds", "eventbridge-lifecycle-terminate.json", time.Date(2022, 2, 8, 9, 12, 5, 0, time.UTC)},
		{"EventBridge time with fractional seconds", "eventbridge-lifecycle-terminate-replace-root-volume.json", time.Date(2021, 1, 13, 0, 12, 37, 214e6, time.UTC)},
		{"direct hook Time", "asg-hook-direct-launching.json", time.Date(2022, 12, 10, 12, 52, 8, 814e6, time.UTC)},
		{"SNS-wrapped hook keeps the hook's Time, not the SNS Timestamp", "sns-wrapped-asg-hook-terminating.json", time.Date(2024, 3, 4, 9, 15, 31, 102e6, time.UTC)},
		{"SNS text message takes the SNS Timestamp", "sns-envelope-generic.json", time.Date(2021, 2, 10, 15, 51, 48, 748e6, time.UTC)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse(readTestdata(t, tc.file))
			require.NoError(t, err)
			require.True(t, tc.want.Equal(ev.Time), "got %s", ev.Time)
		})
	}
}

func TestParseMetadata(t *testing.T) {
	tests := []struct {
		name                                string
		file                                string
		source, detailType, account, region string
		topic                               string
	}{
		{"EventBridge envelope", "ssm-parameter-change-create.json", "aws.ssm", "Parameter Store Change", "111122223333", "us-east-2", ""},
		{"direct hook has no region", "asg-hook-direct-terminating.json", "aws.autoscaling", "", "111122223333", "", ""},
		{"test notification region from the group ARN", "asg-hook-test-notification.json", "aws.autoscaling", "", "111122223333", "us-west-2", ""},
		{"SNS-wrapped hook region and topic from TopicArn", "sns-wrapped-asg-hook-terminating.json", "aws.autoscaling", "", "111122223333", "us-east-1", "arn:aws:sns:us-east-1:111122223333:asg-lifecycle"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse(readTestdata(t, tc.file))
			require.NoError(t, err)
			require.Equal(t, []string{tc.source, tc.detailType, tc.account, tc.region, tc.topic},
				[]string{ev.Source, ev.DetailType, ev.Account, ev.Region, ev.Topic})
		})
	}
}

// TestParseOtherShapes covers well-formed messages that have no fixture from AWS: other envelopes of the
// known kinds, and messages the agent ignores.
func TestParseOtherShapes(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		kind     Kind
		envelope Envelope
		id       string
		group    string
		reason   string // substring of Reason, when set
	}{
		{
			name:     "EventBridge event published through SNS keeps the EventBridge id",
			body:     snsWrap(`{"version":"0","id":"eb-1","detail-type":"Parameter Store Change","source":"aws.ssm","account":"111122223333","time":"2024-05-22T16:44:48Z","region":"us-east-2","resources":[],"detail":{"operation":"Update","name":"/golden-ami/ecs/al2023","type":"String"}}`),
			kind:     KindParameterChange,
			envelope: EnvelopeSNSBridge,
			id:       "eb-1",
		},
		{
			name:     "C1 hook test notification through SNS is a test notification",
			body:     snsWrap(`{"AccountId":"111122223333","RequestId":"req-1","AutoScalingGroupName":"asg-a","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2019-02-20T20:01:15.747Z"}`),
			kind:     KindTestNotification,
			envelope: EnvelopeSNS,
			id:       "sns-1",
			group:    "asg-a",
		},
		{
			name:     "Auto Scaling scaling notification is ignored",
			body:     `{"AccountId":"111122223333","RequestId":"req-2","AutoScalingGroupName":"asg-a","Service":"AWS Auto Scaling","Event":"autoscaling:EC2_INSTANCE_LAUNCH","Time":"2019-02-20T20:01:15Z"}`,
			kind:     KindUnknown,
			envelope: EnvelopeDirect,
			id:       "req-2",
			group:    "asg-a",
			reason:   "autoscaling:EC2_INSTANCE_LAUNCH",
		},
		{
			name:     "EventBridge event of an unlisted kind is ignored and named",
			body:     `{"version":"0","id":"eb-2","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"111122223333","time":"2024-01-13T00:12:37Z","region":"us-west-2","resources":[],"detail":{"instance-id":"i-1","instance-action":"terminate"}}`,
			kind:     KindUnknown,
			envelope: EnvelopeEventBridge,
			id:       "eb-2",
			reason:   `"EC2 Spot Instance Interruption Warning" from "aws.ec2"`,
		},
		{
			name:     "SNS message that is JSON of no known kind is ignored",
			body:     snsWrap(`{"hello":"world"}`),
			kind:     KindUnknown,
			envelope: EnvelopeSNS,
			id:       "sns-1",
			reason:   "JSON object of no kind",
		},
		{
			name:     "SNS subscription confirmation is ignored",
			body:     `{"Type":"SubscriptionConfirmation","MessageId":"m","Token":"t","TopicArn":"arn:aws:sns:us-east-1:111122223333:t","Message":"You have chosen to subscribe","SubscribeURL":"https://example.com"}`,
			kind:     KindUnknown,
			envelope: EnvelopeDirect,
		},
		{
			name:     "empty JSON object is ignored",
			body:     `{}`,
			kind:     KindUnknown,
			envelope: EnvelopeDirect,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse([]byte(tc.body))
			require.NoError(t, err)
			require.Equal(t, tc.kind, ev.Kind)
			require.Equal(t, tc.envelope, ev.Envelope)
			require.Equal(t, tc.id, ev.ID)
			require.Equal(t, tc.group, ev.Group)
			require.Contains(t, ev.Reason, tc.reason)
		})
	}
}

// Every name Auto Scaling's pattern admits is a group name: the check refuses only what Auto Scaling could not
// have written, so no real lifecycle action is dead-lettered by it.
func TestParseAcceptsEveryGroupNameAutoScalingAllows(t *testing.T) {
	for _, name := range []string{
		"a",
		strings.Repeat("a", 255),
		strings.Repeat("é", 255), // 255 characters, 510 bytes
		strings.Repeat("😀", 255), // 255 characters, 510 UTF-16 code units
		"asg with\ttab\r\nand line breaks",
		"ecs-prod:blue/green_1.2",
	} {
		t.Run(name[:min(len(name), 24)], func(t *testing.T) {
			body := `{"LifecycleHookName":"h","AutoScalingGroupName":` + strconv.Quote(name) +
				`,"EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`
			ev, err := Parse([]byte(body))
			require.NoError(t, err)
			require.Equal(t, KindLifecycleAction, ev.Kind)
			require.Equal(t, name, ev.Group)
		})
	}
}

// Members that tell a kind are ordinary words for other senders ({"type":"order"}): in another letter case,
// and beside no member only AWS writes, they make an ignored message, not a malformed one, so a shared queue
// does not fill the dead-letter queue.
func TestParseIgnoresOrdinaryWordsInAnotherLetterCase(t *testing.T) {
	for _, body := range []string{
		`{"type":"order","source":"shop","event":"created"}`,
		`{"type":"Notification","Source":"billing"}`,
		`{"event":"autoscaling:TEST_NOTIFICATION"}`,
	} {
		ev, err := Parse([]byte(body))
		require.NoError(t, err, body)
		require.Equal(t, KindUnknown, ev.Kind, body)
	}
}

// snsWrap returns an SNS notification (id sns-1) whose Message is msg.
func snsWrap(msg string) string {
	return `{"Type":"Notification","MessageId":"sns-1","TopicArn":"arn:aws:sns:us-east-1:111122223333:t",` +
		`"Message":` + quoteJSON(msg) + `,"Timestamp":"2024-03-04T09:15:31.250Z"}`
}

func quoteJSON(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(s) + `"`
}

func TestParseMalformed(t *testing.T) {
	const (
		hookOK   = `"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"`
		ebPrefix = `{"version":"0","id":"eb-1","source":"aws.autoscaling","account":"111122223333","time":"2024-01-13T00:12:37Z","region":"us-west-2",`
		ssmStart = `{"version":"0","id":"eb-2","detail-type":"Parameter Store Change","source":"aws.ssm","time":"2024-01-13T00:12:37Z",`
	)
	tests := []struct {
		name string
		body string
		msg  string // substring of the error message
	}{
		{"empty body", ``, "empty body"},
		{"blank body", " \n\t ", "empty body"},
		{"not JSON", `hello`, "not JSON"},
		{"truncated JSON", `{"Type":"Notification",`, "not JSON"},
		{"two JSON values", `{} {}`, "not JSON"},
		{"JSON array", `[{"Type":"Notification"}]`, "JSON array, not an object"},
		{"JSON string", `"hello"`, "JSON string, not an object"},
		{"JSON number", `42`, "JSON number, not an object"},
		{"JSON null", `null`, "JSON null, not an object"},
		{"SNS notification without Message", `{"Type":"Notification","MessageId":"m-1","TopicArn":"arn:aws:sns:us-east-1:111122223333:t"}`, "SNS notification m-1 from topic arn:aws:sns:us-east-1:111122223333:t has no Message"},
		{"SNS notification with null Message", `{"Type":"Notification","MessageId":"m-1","TopicArn":"t","Message":null}`, "has no Message"},
		{"SNS notification with a Message that is not a string", `{"Type":"Notification","MessageId":"m-1","TopicArn":"t","Message":{"a":1}}`, "decoding SNS notification"},
		{"SNS-wrapped lifecycle action without token", snsWrap(`{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`), "SNS notification sns-1 from topic arn:aws:sns:us-east-1:111122223333:t: lifecycle action"},
		{"SNS notification with a bad Timestamp", `{"Type":"Notification","MessageId":"m-1","TopicArn":"t","Message":"hi","Timestamp":"yesterday"}`, `SNS Timestamp "yesterday" is not an RFC 3339 time`},
		{"launch result without group", ebPrefix + `"detail-type":"EC2 Instance Launch Successful","detail":{"EC2InstanceId":"i-1","StatusCode":"InProgress"}}`, "detail.AutoScalingGroupName is missing"},
		{"terminate result without group", ebPrefix + `"detail-type":"EC2 Instance Terminate Successful","detail":{"EC2InstanceId":"i-1","StatusCode":"InProgress"}}`, "detail.AutoScalingGroupName is missing"},
		{"instance state change without instance id", `{"version":"0","id":"eb-4","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","time":"2024-01-13T00:12:37Z","detail":{"state":"terminated"}}`, "detail.instance-id is missing or not an instance id"},
		{"instance state change with an instance id of the wrong shape", `{"version":"0","id":"eb-5","detail-type":"EC2 Instance State-change Notification","source":"aws.ec2","time":"2024-01-13T00:12:37Z","detail":{"instance-id":"i-NOTHEX","state":"terminated"}}`, "detail.instance-id is missing or not an instance id"},
		{"operator wake-up without action", `{"version":"0","id":"op-1","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"group":"g","who":"alice"}}`, "detail.action \"\" is not one of approve, rollback, pause, resume, retry"},
		{"operator wake-up with an unknown action", `{"version":"0","id":"op-1","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"action":"terminate","group":"g","who":"alice"}}`, "detail.action \"terminate\" is not one of"},
		{"operator wake-up without who", `{"version":"0","id":"op-1","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"action":"approve","group":"g"}}`, "detail.who is missing"},
		{"operator wake-up without target", `{"version":"0","id":"op-1","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"action":"approve","who":"alice"}}`, "detail.group is missing"},
		{"operator wake-up approving globally", `{"version":"0","id":"op-1","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"action":"approve","scope":"global","who":"alice"}}`, "scope global goes only with pause and resume"},
		{"operator wake-up with group and global scope", `{"version":"0","id":"op-1","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"action":"resume","scope":"global","group":"g","who":"alice"}}`, "both a group and the global scope"},
		{"operator wake-up with a group that is not a string", `{"version":"0","id":"op-1","detail-type":"Patch Agent Operator Command","source":"patch-agent.operator","time":"2026-12-01T09:00:00Z","detail":{"action":"approve","group":7,"who":"alice"}}`, "Patch Agent Operator Command from patch-agent.operator"},
		{"container instance change without cluster ARN", `{"version":"0","id":"eb-3","detail-type":"ECS Container Instance State Change","source":"aws.ecs","time":"2024-01-13T00:12:37Z","detail":{"ec2InstanceId":"i-1","clusterArn":"default"}}`, "detail.clusterArn is missing or not a cluster ARN"},
		{"lifecycle action without token", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, "is missing LifecycleActionToken"},
		{"lifecycle action without instance id", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, "is missing EC2InstanceId"},
		{"lifecycle action without group name", `{"LifecycleHookName":"h","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, "is missing AutoScalingGroupName"},
		{"lifecycle action without transition", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleActionToken":"tok"}`, "is missing LifecycleTransition"},
		{"lifecycle action with only a hook name", `{"LifecycleHookName":"h"}`, "is missing LifecycleActionToken, EC2InstanceId, AutoScalingGroupName, LifecycleTransition"},
		{"lifecycle action without hook name (CompleteLifecycleAction needs it)", `{"AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, "is missing LifecycleHookName"},
		{"SNS notification without TopicArn", `{"Type":"Notification","MessageId":"m-1","Message":"hi"}`, "SNS notification without TopicArn"},
		{"SNS Message that starts like JSON but is truncated", `{"Type":"Notification","MessageId":"m-1","TopicArn":"t","Message":"{\"Origin\": \"EC2\""}`, "looks like JSON but does not parse"},
		{"Type that is not a string", `{"Type":5}`, `member "Type" is not a string`},
		{"Event that is not a string", `{"Event":7}`, `member "Event" is not a string`},
		{"lifecycle action with an unknown transition", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_LAUNCH"}`, `LifecycleTransition "autoscaling:EC2_INSTANCE_LAUNCH" is neither`},
		{"lifecycle action that names its token twice", `{` + hookOK + `,"LifecycleActionToken":7}`, `member "LifecycleActionToken" appears twice in the message`},
		{"a member named twice in different letter case (encoding/json folds case)", `{` + hookOK + `,"EC2InstanceID":"i-0ffffffffffffffff"}`, `member "EC2InstanceID" appears twice in the message`},
		{"duplicate member inside the EventBridge detail", ebPrefix + `"detail-type":"EC2 Instance-terminate Lifecycle Action","detail":{` + hookOK + `,"EC2InstanceId":"i-other"}}`, `member "EC2InstanceId" appears twice in "detail"`},
		{"duplicate member inside an SNS Message", `{"Type":"Notification","MessageId":"m","TopicArn":"arn:aws:sns:us-east-1:111122223333:t","Message":"{\"Event\":\"autoscaling:TEST_NOTIFICATION\",\"Event\":\"x\"}"}`, `Message: member "Event" appears twice`},
		{"lifecycle action with a malformed instance id (C19: Auto Scaling would refuse it on every look)", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"not-an-instance","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `EC2InstanceId "not-an-instance" is not an EC2 instance id`},
		{"lifecycle action with an instance id too long for Auto Scaling", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-0123456789abcdef01","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `is not an EC2 instance id`},
		{"lifecycle action with an instance id in upper case", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"I-0A1B2C3D","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `is not an EC2 instance id`},
		{"lifecycle action with a bad Time", `{` + hookOK + `,"Time":"2024-13-01T00:00:00Z"}`, "is not an RFC 3339 time"},
		{"EventBridge lifecycle action without token", ebPrefix + `"detail-type":"EC2 Instance-terminate Lifecycle Action","detail":{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}}`, "EventBridge event eb-1 (EC2 Instance-terminate Lifecycle Action from aws.autoscaling): lifecycle action"},
		{"EventBridge lifecycle action whose transition contradicts its detail-type", ebPrefix + `"detail-type":"EC2 Instance-launch Lifecycle Action","detail":{` + hookOK + `}}`, "contradicts the detail-type"},
		{"EventBridge event whose detail is an array", ebPrefix + `"detail-type":"EC2 Instance-terminate Lifecycle Action","detail":[1]}`, "detail is not a JSON object"},
		{"EventBridge event whose detail is a string", ebPrefix + `"detail-type":"Scheduled Event","detail":"{}"}`, "detail is not a JSON object"},
		{"EventBridge event whose detail is null", ebPrefix + `"detail-type":"Scheduled Event","detail":null}`, "detail is not a JSON object"},
		{"EventBridge event without detail", ebPrefix + `"detail-type":"Scheduled Event"}`, "has no detail"},
		{"EventBridge event with a bad time", `{"id":"eb-1","detail-type":"Scheduled Event","source":"aws.events","time":"01/03/2019","detail":{}}`, `EventBridge event time "01/03/2019" is not an RFC 3339 time`},
		{"EventBridge event whose source is not a string", `{"id":"eb-1","detail-type":"Scheduled Event","source":5,"detail":{}}`, `member "source" is not a string`},
		{"SNS Message that looks like JSON but is not", snsWrap(`{not json`), "looks like JSON but does not parse"},
		{"Parameter Store Change without detail.name", ssmStart + `"detail":{"operation":"Update","type":"String"}}`, "detail.name (the parameter name) is missing"},
		{"Parameter Store Change without detail.operation", ssmStart + `"detail":{"name":"/golden-ami/ecs/al2023"}}`, "detail.operation is missing"},
		{"Parameter Store Change whose name is not a string", ssmStart + `"detail":{"operation":"Update","name":["a"]}}`, "cannot unmarshal"},
		{"SNS-wrapped Parameter Store Change without detail.name", snsWrap(ssmStart + `"detail":{"operation":"Update"}}`), "SNS notification sns-1"},
		{"test notification with a bad Time", `{"Event":"autoscaling:TEST_NOTIFICATION","AutoScalingGroupName":"asg-a","Time":"now"}`, "is not an RFC 3339 time"},
		// encoding/json would read a member in other letter case as the field; the kind is told by AWS's spelling.
		{"lifecycle action whose token is spelled in camelCase (a custom forwarder)", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","lifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `member "lifecycleActionToken": AWS spells it "LifecycleActionToken"`},
		{"lifecycle action with every member in camelCase", `{"lifecycleHookName":"h","autoScalingGroupName":"asg-a","ec2InstanceId":"i-1","lifecycleActionToken":"tok","lifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `member "lifecycleActionToken": AWS spells it "LifecycleActionToken"`},
		{"SNS-wrapped lifecycle action in camelCase", snsWrap(`{"lifecycleHookName":"h","autoScalingGroupName":"asg-a","ec2InstanceId":"i-1","lifecycleActionToken":"tok","lifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`), `SNS notification sns-1 from topic arn:aws:sns:us-east-1:111122223333:t: member "lifecycleActionToken"`},
		{"lifecycle action whose transition is spelled with U+017F, which encoding/json folds with s", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg-a","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTranſition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `member "LifecycleTranſition": AWS spells it "LifecycleTransition"`},
		{"EventBridge event whose detail-type is capitalised", `{"id":"eb-1","Detail-Type":"EC2 Instance-terminate Lifecycle Action","source":"aws.autoscaling","detail":{` + hookOK + `}}`, `member "Detail-Type": AWS spells it "detail-type"`},
		{"EventBridge event whose source is capitalised", `{"id":"eb-1","detail-type":"EC2 Instance-terminate Lifecycle Action","Source":"aws.autoscaling","detail":{` + hookOK + `}}`, `member "Source": AWS spells it "source"`},
		{"SNS notification whose Type is in lower case", `{"type":"Notification","MessageId":"m-1","TopicArn":"arn:aws:sns:us-east-1:111122223333:t","Message":"hi"}`, `member "type": AWS spells it "Type"`},
		{"a member named twice, once with U+017F (encoding/json folds it with s)", `{` + hookOK + `,"EC2InſtanceId":"i-0ffffffffffffffff"}`, `member "EC2InſtanceId" appears twice in the message`},
		// One message is one kind: members of two are a contradiction, not a choice.
		{"test notification that carries a lifecycle action", `{"Event":"autoscaling:TEST_NOTIFICATION",` + hookOK + `}`, `the message has the members of a lifecycle action (LifecycleActionToken, LifecycleTransition, LifecycleHookName) and of an Auto Scaling notification ("Event":"autoscaling:TEST_NOTIFICATION"): contradictory`},
		{"SNS-wrapped test notification that carries a lifecycle token", snsWrap(`{"Event":"autoscaling:TEST_NOTIFICATION","AutoScalingGroupName":"asg-a","LifecycleActionToken":"tok"}`), `the message has the members of a lifecycle action (LifecycleActionToken) and of an Auto Scaling notification`},
		{"scaling notification that carries a lifecycle action", `{"Event":"autoscaling:EC2_INSTANCE_TERMINATE",` + hookOK + `}`, `and of an Auto Scaling notification ("Event":"autoscaling:EC2_INSTANCE_TERMINATE")`},
		{"SNS notification that carries a lifecycle action beside its Message", `{"Type":"Notification","MessageId":"m-1","TopicArn":"arn:aws:sns:us-east-1:111122223333:t","Message":"hi",` + hookOK + `}`, `the message has the members of an SNS notification ("Type":"Notification") and of a lifecycle action`},
		{"EventBridge event that carries a lifecycle action beside its detail", `{"id":"eb-1","detail-type":"Scheduled Event","source":"aws.events","time":"2024-01-13T00:12:37Z","detail":{},` + hookOK + `}`, `the message has the members of an EventBridge event (detail-type and source) and of a lifecycle action`},
		{"AMI announcement that carries a lifecycle action", snsWrap(`{"ECSAmis":[],` + hookOK + `}`), `and of the ECS-optimized AMI update announcement (ECSAmis)`},
		// Auto Scaling group names: 1 to 255 characters, no control character but tab, line feed and carriage return.
		{"lifecycle action whose group name carries terminal escapes", `{"LifecycleHookName":"h","AutoScalingGroupName":"g\u001b[2J\u001b[31mEVIL","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `AutoScalingGroupName "g\x1b[2J\x1b[31mEVIL" (14 characters) is not an Auto Scaling group name`},
		{"lifecycle action whose group name carries a NUL", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg\u0000a","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `AutoScalingGroupName "asg\x00a" (5 characters) is not an Auto Scaling group name`},
		{"lifecycle action whose instance id member is mis-cased", `{"LifecycleHookName":"h","AutoScalingGroupName":"g","EC2InstanceID":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `member "EC2InstanceID" is not Auto Scaling's "EC2InstanceId"`},
		{"lifecycle action whose instance id member folds to Auto Scaling's (U+017F)", `{"LifecycleHookName":"h","AutoScalingGroupName":"g","EC2In\u017ftanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `member "EC2InſtanceId" is not Auto Scaling's "EC2InstanceId"`},
		{"EventBridge lifecycle action whose detail has a mis-cased member", ebPrefix + `"detail-type":"EC2 Instance-terminate Lifecycle Action","detail":{"LifecycleHookName":"h","AutoScalingGroupName":"g","EC2InstanceId":"i-1","LifecycleActionToken":"tok","lifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}}`, `member "lifecycleTransition" is not Auto Scaling's "LifecycleTransition"`},
		{"lifecycle action whose hook name carries terminal escapes", `{"LifecycleHookName":"h\u001b[2J","AutoScalingGroupName":"g","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `LifecycleHookName "h\x1b[2J" (5 characters) is not a lifecycle hook name`},
		{"lifecycle action whose hook name is longer than Auto Scaling allows", `{"LifecycleHookName":"` + strings.Repeat("h", 256) + `","AutoScalingGroupName":"g","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `(256 characters) is not a lifecycle hook name`},
		{"lifecycle action whose group name carries U+FFFF", `{"LifecycleHookName":"h","AutoScalingGroupName":"asg\uffff","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `is not an Auto Scaling group name`},
		{"lifecycle action whose group name is 256 characters", `{"LifecycleHookName":"h","AutoScalingGroupName":"` + strings.Repeat("a", 256) + `","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}`, `(256 characters) is not an Auto Scaling group name (1 to 255 characters`},
		{"EventBridge lifecycle action whose group name carries terminal escapes", ebPrefix + `"detail-type":"EC2 Instance-terminate Lifecycle Action","detail":{"LifecycleHookName":"h","AutoScalingGroupName":"g\u001b]0;x\u0007","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_TERMINATING"}}`, `AutoScalingGroupName "g\x1b]0;x\a" (7 characters) is not an Auto Scaling group name`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse([]byte(tc.body))
			require.Error(t, err)
			require.True(t, errors.Is(err, ErrMalformed), "error %q does not wrap ErrMalformed", err)
			require.Contains(t, err.Error(), tc.msg)
			require.True(t, strings.HasPrefix(err.Error(), "malformed message: "), err.Error())
			require.Equal(t, Event{}, ev)
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		name string
		file string
		want string
	}{
		{
			name: "terminate lifecycle action",
			file: "asg-hook-direct-terminating.json",
			want: "lifecycle action TERMINATING for instance i-0a1b2c3d4e5f60718 in group ecs-prod-cluster-asg (hook patch-agent-drain) [direct, id 2b9a61c4-7e0d-4c1e-9f4a-1c0a5d3e7b21]",
		},
		{
			name: "C14 root volume replacement names its action",
			file: "eventbridge-lifecycle-terminate-replace-root-volume.json",
			want: "lifecycle action TERMINATING for instance i-1234567890abcdef0 in group my-asg (hook my-terminate-lifecycle-hook, action ReplaceRootVolume) [eventbridge, id 12345678-1234-1234-1234-123456789012]",
		},
		{
			name: "parameter that failed AMI validation",
			file: "ssm-parameter-change-image-validation-failed.json",
			want: "Parameter Store Change Create MyGoldenAMI: value failed validation (Unable to Describe Resource), ignored [eventbridge, id eed4a719-0fa4-6a49-80d8-8ac65EXAMPLE]",
		},
		{
			name: "C1 test notification",
			file: "asg-hook-test-notification.json",
			want: "test notification for group ecs-default-cluster-Sandbox-EcsClusterAutoScaleGroupSandbox-CLJKMQ0V93DL, ignored [direct, id 4781ed87-354a-11e9-9f76-cb62a7958e88]",
		},
		{
			name: "operator wake-up names who sent it",
			file: "operator-wakeup-approve.json",
			want: "operator wake-up (approve by arn:aws:sts::111122223333:assumed-role/ops/alice): look again at group prod-ecs-asg [eventbridge, id 5f0c8a8e-3b7d-4c1a-9e2f-6d4b8a1c0e57]",
		},
		{
			name: "AMI announcement names its topic",
			file: "sns-ecs-ami-update.json",
			want: "ECS-optimized AMI update announcement: resolve every tracked parameter [sns from arn:aws:sns:us-east-1:177427601217:ecs-optimized-amazon-ami-update, id 163ab552-da6f-596f-9437-e79a17ccfcd0]",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ev, err := Parse(readTestdata(t, tc.file))
			require.NoError(t, err)
			require.Equal(t, tc.want, ev.Describe())
		})
	}
}

func TestDescribeIsOneLine(t *testing.T) {
	body := snsWrap(`{"version":"0","id":"a\nb","detail-type":"x\r\ny","source":"evil\u2028","time":"2024-01-13T00:12:37Z","detail":{}}`)
	ev, err := Parse([]byte(body))
	require.NoError(t, err)
	require.NotContains(t, ev.Describe(), "\n")
	require.NotContains(t, ev.Describe(), "\r")
	require.NotContains(t, ev.Describe(), "\u2028")
	require.NotContains(t, Event{}.Describe(), "\n")
}

// BenchmarkParse parses every fixture in testdata per iteration and reports messages per second.
func BenchmarkParse(b *testing.B) {
	var bodies [][]byte
	for _, f := range fixtureFiles(b) {
		body, err := os.ReadFile(f)
		require.NoError(b, err)
		bodies = append(bodies, body)
	}
	for b.Loop() {
		for _, body := range bodies {
			if _, err := Parse(body); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*len(bodies))/b.Elapsed().Seconds(), "msgs/s")
}

// TestNewOperatorWakeUpRoundTrips: the body an operator command sends parses back to the same detail (global
// scope included), and a detail Parse would refuse is refused when building it.
func TestNewOperatorWakeUpRoundTrips(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	for _, o := range []OperatorWakeUp{
		{Action: OperatorRollback, Group: "prod-ecs-asg", Who: "alice"},
		{Action: OperatorResume, Scope: OperatorGlobal, Who: "arn:aws:sts::111122223333:assumed-role/ops/bob"},
	} {
		body, err := NewOperatorWakeUp(o, "id-1", "eu-west-1", "111122223333", at)
		require.NoError(t, err)
		ev, err := Parse(body)
		require.NoError(t, err)
		require.Equal(t, KindOperatorWakeUp, ev.Kind)
		require.Equal(t, &o, ev.Operator)
		require.Equal(t, "id-1", ev.ID)
		require.Equal(t, at, ev.Time)
	}
	_, err := NewOperatorWakeUp(OperatorWakeUp{Action: OperatorApprove, Who: "alice"}, "id-2", "", "", at)
	require.ErrorContains(t, err, "detail.group is missing")
}
