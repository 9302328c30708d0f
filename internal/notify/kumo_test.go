package notify_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/notify"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// envelope is an EventBridge event as a rule's SQS target receives it.
type envelope struct {
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Detail     json.RawMessage `json:"detail"`
}

func TestKumoNotificationsReachAQueueThroughARuleOnTheSource(t *testing.T) {
	ctx := testenv.Context(t)
	cfg := testenv.AWSConfig(testenv.Kumo(t))
	sqsAPI, eb := sqs.NewFromConfig(cfg), eventbridge.NewFromConfig(cfg)
	name := testenv.UniqueName(t, "notify")
	q, err := sqsAPI.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	require.NoError(t, err)
	attrs, err := sqsAPI.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	// The rule of docs/notifications.md, narrowed to this test's group (the kumo is shared).
	pattern := `{"source":["patch-agent"],"detail":{"group":["` + name + `"]}}`
	_, err = eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(name), EventPattern: aws.String(pattern)})
	require.NoError(t, err)
	_, err = eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(name),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(attrs.Attributes["QueueArn"])}}})
	require.NoError(t, err)

	n := notify.New(eb, notify.Options{AgentVersion: "v1.4.0"})
	prev := rec(state.PhaseReplacing, "")
	prev.Group = name
	next := prev
	next.Phase, next.Reason = state.PhaseRollingBack, "failed: replacement i-5 not healthy after 10m0s"
	n.TargetObserved(model.Target{Group: name, Platform: platform, Cluster: "c1"}, model.GroupView{}, prev, nil)
	n.RolloutTransition(prev, next, "rolling-back")
	n.LifecycleActionCompleted(state.Hook{Group: name, HookName: "patch-agent-drain", InstanceID: "i-1",
		Transition: events.TransitionTerminating, Result: "CONTINUE", CompletedAt: t0}, 40*time.Second)
	other := rec(state.PhaseVerifying, "")
	other.Group = "someone-else" // not matched by the rule
	n.RolloutTransition(other, rec(state.PhaseCompleted, ""), "rollout completed")
	require.NoError(t, n.Flush(ctx))

	got := map[string]json.RawMessage{}
	deadline := time.Now().Add(20 * time.Second)
	for len(got) < 2 {
		require.True(t, time.Now().Before(deadline), "delivered so far: %v", got)
		out, err := sqsAPI.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range out.Messages {
			var e envelope
			require.NoError(t, json.Unmarshal([]byte(aws.ToString(m.Body)), &e))
			require.Equal(t, "patch-agent", e.Source)
			require.NotContains(t, got, e.DetailType, "one event of each kind")
			got[e.DetailType] = e.Detail
		}
	}

	var rd map[string]any
	require.NoError(t, json.Unmarshal(got["Rollout State Change"], &rd))
	require.Equal(t, map[string]any{"schemaVersion": "1", "event": "rolling-back", "group": name, "platform": "ecs", "cluster": "c1",
		"phase": "RollingBack", "previousPhase": "Replacing", "reason": next.Reason, "targetImageId": imageB,
		"previousImageId": imageA, "instances": 3.0, "onTarget": 1.0, "at": "2026-11-30T02:01:00Z", "rejectReason": "", "agentVersion": "v1.4.0"}, rd)

	var ld notify.LifecycleDetail
	require.NoError(t, json.Unmarshal(got["Lifecycle Action Completed"], &ld))
	require.Equal(t, notify.LifecycleDetail{SchemaVersion: "1", Group: name, Platform: "ecs", Cluster: "c1", InstanceID: "i-1",
		LifecycleHookName: "patch-agent-drain", LifecycleTransition: events.TransitionTerminating, Result: "CONTINUE",
		DrainSeconds: 40, At: t0, AgentVersion: "v1.4.0"}, ld)

	out, err := sqsAPI.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: q.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
	require.NoError(t, err)
	require.Empty(t, out.Messages, "the other group's event did not match the rule")
}
