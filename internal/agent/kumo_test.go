package agent_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
	"github.com/patch-agent/patch-agent/internal/testworld/crash"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// dynamoStore creates a fresh table on kumo and returns the DynamoDB store on it.
func dynamoStore(t *testing.T) state.Store {
	t.Helper()
	api := dynamodb.NewFromConfig(testenv.AWSConfig(testenv.Kumo(t)))
	table := testenv.UniqueName(t, "tbl")
	require.NoError(t, state.CreateTable(testenv.Context(t), api, table))
	return state.NewDynamoDB(api, table)
}

// parameterStoreChangePattern is the pattern of the stack's Parameter Store Change rule
// (cloudformation/patch-agent.yaml) with its parameters resolved.
const parameterStoreChangePattern = `{"source":["aws.ssm"],"detail-type":["Parameter Store Change"],` +
	`"detail":{"name":[{"prefix":"/golden-ami/"}],"operation":["Create","Update","Delete"]}}`

func TestKumoEventBridgeRuleDeliversTheFixtureEventAndTheAgentActs(t *testing.T) {
	ctx := testenv.Context(t)
	cfg := testenv.AWSConfig(testenv.Kumo(t))
	sqsAPI, eb := sqs.NewFromConfig(cfg), eventbridge.NewFromConfig(cfg)
	name := testenv.UniqueName(t, "eb")
	q, err := sqsAPI.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name)})
	require.NoError(t, err)
	arn, err := sqsAPI.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
	require.NoError(t, err)
	_, err = eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(name), EventPattern: aws.String(parameterStoreChangePattern)})
	require.NoError(t, err)
	_, err = eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(name),
		Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(arn.Attributes["QueueArn"])}}})
	require.NoError(t, err)

	// The group's parameter is the one the fixture names.
	g := testworld.GroupSetup{Name: "golden", Parameter: "/golden-ami/ecs/al2023", Min: 2, Max: 4, Desired: 2}
	spec := oneGroup(&g)
	spec.SQS, spec.QueueURL = sqsAPI, aws.ToString(q.QueueUrl)
	spec.Store = dynamoStore(t)
	w := build(t, spec)
	// The agent's hooks notify no queue: their actions reach the agent through the stack's EventBridge rule,
	// as the agent's queue here is kumo's and not the simulated account's.
	for _, h := range []sim.HookSpec{
		{Name: testworld.HookName, Transition: sim.TransitionTerminating, HeartbeatTimeout: 300 * time.Second, DefaultResult: sim.ResultContinue},
		{Name: testworld.LaunchHookName, Transition: sim.TransitionLaunching, HeartbeatTimeout: 300 * time.Second, DefaultResult: sim.ResultAbandon},
	} {
		require.NoError(t, w.Account.PutLifecycleHook(g.Name, h))
	}
	require.NoError(t, w.Agent.RunOnce(ctx))
	require.Equal(t, state.PhaseIdle, w.Rollout(ctx, g.Name).Phase)

	w.Account.PutParameter(g.Parameter, testworld.ImageB)
	fixture := fixture(t, "ssm-parameter-change-update-golden-ami.json")
	// PutEvents takes the event's parts; EventBridge adds id, time, account and region itself.
	_, err = eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{{
		Source: aws.String("aws.ssm"), DetailType: aws.String("Parameter Store Change"),
		Detail: aws.String(detailOf(t, fixture))}}})
	require.NoError(t, err)

	deadline := time.Now().Add(30 * time.Second)
	for w.Rollout(ctx, g.Name).TargetImageID != testworld.ImageB {
		require.True(t, time.Now().Before(deadline), "the agent never acted on the delivered event")
		_, err := w.Agent.Consumer.PollOnce(ctx, time.Second)
		require.NoError(t, err)
	}
	r := w.Rollout(ctx, g.Name)
	require.NotEqual(t, state.PhaseDetected, r.Phase, "the same poll prepared the launch template: %+v", r)
	requireRefreshOnNewVersion(t, w, g.Name)
	require.Equal(t, int64(1), w.Agent.Consumer.Stats.Processed.Load())
}

// detailOf extracts the "detail" object of an EventBridge event body.
func detailOf(t *testing.T, body string) string {
	t.Helper()
	ev := struct {
		Detail map[string]any `json:"detail"`
	}{}
	require.NoError(t, jsonUnmarshal(body, &ev))
	return jsonMarshal(t, ev.Detail)
}

// TestKumoCrashMatrixOnDynamoDB runs every third crash point of the in-memory matrix of a refresh rollout
// (TestRefreshCrashMatrixStartsOneRefreshWhateverEffectTheAgentDiesAt, ECS) on the DynamoDB store: the
// conditional writes and leases are DynamoDB's here, not the memory store's. Each run completes on ImageB with
// one refresh, repeats no effect and leaves no lifecycle action or message behind.
func TestKumoCrashMatrixOnDynamoDB(t *testing.T) {
	ref := refreshCrashScenario(t)
	n, err := crash.CountCrashEffects(ref)
	require.NoError(t, err)
	for at := 1; at <= n; at += 3 {
		t.Run(fmt.Sprintf("crash after effect %d of %d", at, n), func(t *testing.T) {
			sc := refreshCrashScenario(t)
			sc.Build = func() (*testworld.World, error) {
				g := testworld.GroupSetup{Name: "rc", Min: 1, Max: 4, Desired: 3, Tags: map[string]string{model.TagStrategy: model.StrategyRefresh}}
				spec := oneGroup(&g)
				spec.Store = dynamoStore(t)
				return testworld.Build(spec)
			}
			run, err := crash.RunCrashScenario(sc, at, crash.CrashAfterEffect)
			require.NoError(t, err)
			require.Equal(t, 1, run.Restarts, "one crash, one fresh incarnation")
		})
	}
}

func TestKumoReplicasOnOneDynamoDBTableNeverActTwice(t *testing.T) {
	runReplicas(t, dynamoStore)
}
