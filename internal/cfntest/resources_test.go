package cfntest

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/awslabs/goformation/v7/cloudformation/policies"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/state"
)

// queueOfRule is the queue a rule of the stack targets: the wake-up rules (routes: events.KindWakeUp) the
// wake-up queue, every other rule the queue, so that no wake-up waits in front of a lifecycle action.
func queueOfRule(id string) string {
	if routes[id].kind == events.KindWakeUp {
		return "WakeUpQueue"
	}
	return "Queue"
}

// queuePolicies maps each queue to the id of its queue policy.
var queuePolicies = map[string]string{"Queue": "QueuePolicy", "WakeUpQueue": "WakeUpQueuePolicy"}

func TestQueuePolicyAdmitsExactlyTheRulesOfTheStack(t *testing.T) {
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) {
			s := loadStack(t, c.params)
			rules := map[string][]string{} // queue -> the rules that target it
			for _, id := range s.resourcesOfType("AWS::Events::Rule") {
				q := queueOfRule(id)
				rules[q] = append(rules[q], arnOf(id))
				rule := s.tpl.GetAllEventsRuleResources()[id]
				require.Lenf(t, rule.Targets, 1, "rule %s", id)
				require.Equalf(t, arnOf(q), rule.Targets[0].Arn, "rule %s targets %s", id, q)
			}
			require.NotEmpty(t, rules["Queue"])
			require.Len(t, rules["WakeUpQueue"], 4, "the four wake-up rules")

			policies := s.tpl.GetAllSQSQueuePolicyResources()
			require.Len(t, policies, 2, "one queue policy per queue")
			for queue, id := range queuePolicies {
				p := policies[id]
				require.NotNil(t, p, id)
				require.Equal(t, []string{refTo(queue)}, p.Queues, "the policy is on its queue only (the DLQ needs none)")
				var allows []statement
				for _, st := range parseStatements(t, id, p.PolicyDocument) {
					switch st.effect {
					case "Allow":
						allows = append(allows, st)
					case "Deny":
					default:
						t.Fatalf("%s: effect %q", st.where, st.effect)
					}
				}
				require.Len(t, allows, 1, "one Allow statement: EventBridge rules of this stack")
				st := allows[0]
				require.Equal(t, map[string]any{"Service": "events.amazonaws.com"}, st.principal)
				require.Equal(t, []string{"sqs:SendMessage"}, st.actions)
				require.Equal(t, []string{arnOf(queue)}, st.resources)
				require.Equal(t, map[string]map[string][]string{"ArnEquals": {"aws:SourceArn": st.conditions["ArnEquals"]["aws:SourceArn"]}},
					st.conditions, "the only condition is the source ARN")
				require.ElementsMatch(t, rules[queue], st.conditions["ArnEquals"]["aws:SourceArn"],
					"aws:SourceArn lists every rule of the stack that targets %s and nothing else", queue)
			}
		})
	}
}

func TestQueueRedrivesToTheDeadLetterQueue(t *testing.T) {
	s := loadStack(t, defaultConfig)
	q, err := s.tpl.GetSQSQueueWithName("Queue")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"deadLetterTargetArn": arnOf("DeadLetterQueue"), "maxReceiveCount": float64(5)}, q.RedrivePolicy)
	require.Equal(t, 120, aws.ToInt(q.VisibilityTimeout), "seconds")
	require.Equal(t, 4*24*3600, aws.ToInt(q.MessageRetentionPeriod), "seconds")
	require.True(t, aws.ToBool(q.SqsManagedSseEnabled))
	require.Nil(t, q.KmsMasterKeyId, "SSE-SQS: EventBridge can send without a key policy")

	dlq, err := s.tpl.GetSQSQueueWithName("DeadLetterQueue")
	require.NoError(t, err)
	require.Nil(t, dlq.RedrivePolicy)
	require.Equal(t, 14*24*3600, aws.ToInt(dlq.MessageRetentionPeriod), "seconds")
	require.True(t, aws.ToBool(dlq.SqsManagedSseEnabled))

	wq, err := s.tpl.GetSQSQueueWithName("WakeUpQueue")
	require.NoError(t, err)
	require.Equal(t, q.RedrivePolicy, wq.RedrivePolicy, "the wake-up queue redrives to the same dead-letter queue")
	require.Equal(t, aws.ToInt(q.VisibilityTimeout), aws.ToInt(wq.VisibilityTimeout))
	require.Equal(t, aws.ToInt(q.MessageRetentionPeriod), aws.ToInt(wq.MessageRetentionPeriod))
	require.True(t, aws.ToBool(wq.SqsManagedSseEnabled))
	require.Nil(t, wq.KmsMasterKeyId)
}

func TestTableKeepsStateSafely(t *testing.T) {
	s := loadStack(t, defaultConfig)
	tbl, err := s.tpl.GetDynamoDBTableWithName("Table")
	require.NoError(t, err)
	require.Equal(t, "PAY_PER_REQUEST", aws.ToString(tbl.BillingMode))
	require.NotNil(t, tbl.PointInTimeRecoverySpecification)
	require.True(t, aws.ToBool(tbl.PointInTimeRecoverySpecification.PointInTimeRecoveryEnabled), "PITR")
	require.NotNil(t, tbl.SSESpecification)
	require.True(t, tbl.SSESpecification.SSEEnabled, "SSE")
	require.NotNil(t, tbl.TimeToLiveSpecification)
	require.True(t, tbl.TimeToLiveSpecification.Enabled, "TTL")
	require.Equal(t, "expiresAt", aws.ToString(tbl.TimeToLiveSpecification.AttributeName), "TTL attribute (docs/state.md)")
	require.Len(t, tbl.KeySchema, 2)
	require.Equal(t, "pk", tbl.KeySchema[0].AttributeName)
	require.Equal(t, "HASH", tbl.KeySchema[0].KeyType)
	require.Equal(t, "sk", tbl.KeySchema[1].AttributeName)
	require.Equal(t, "RANGE", tbl.KeySchema[1].KeyType)
	for _, a := range tbl.AttributeDefinitions {
		require.Equal(t, "S", a.AttributeType, a.AttributeName)
	}
	require.Equal(t, policies.DeletionPolicy("Retain"), tbl.AWSCloudFormationDeletionPolicy, "rollout history outlives the stack")
	require.Equal(t, policies.UpdateReplacePolicy("Retain"), tbl.AWSCloudFormationUpdateReplacePolicy)
}

func TestContainerRunsTheAgentWithItsResources(t *testing.T) {
	s := loadStack(t, defaultConfig)
	td, err := s.tpl.GetECSTaskDefinitionWithName("TaskDefinition")
	require.NoError(t, err)
	require.Equal(t, arnOf("TaskRole"), aws.ToString(td.TaskRoleArn))
	require.Equal(t, []string{"FARGATE"}, td.RequiresCompatibilities)
	require.Len(t, td.ContainerDefinitions, 1)
	c := td.ContainerDefinitions[0]
	require.Equal(t, required["AgentImage"], c.Image)
	require.Equal(t, []string{"run"}, c.Command)
	env := map[string]string{}
	for _, kv := range c.Environment {
		env[aws.ToString(kv.Name)] = aws.ToString(kv.Value)
	}
	require.Equal(t, map[string]string{
		config.EnvQueueURL:       refTo("Queue"),
		config.EnvWakeUpQueueURL: refTo("WakeUpQueue"),
		config.EnvTable:          refTo("Table"),
		config.EnvRegion:         testRegion,
		config.EnvLogLevel:       "info",
		// The agent's settings: empty keeps the agent's defaults (operator_role_test.go sets them).
		config.EnvAllowedAMIOwners: "",
		config.EnvHealthTimeout:    "",
		config.EnvDrainTimeout:     "",
		config.EnvClusterBudget:    "",
		config.EnvWakeUpEvents:     "true",
	}, env)
	require.True(t, aws.ToBool(c.ReadonlyRootFilesystem))
	require.NotNil(t, c.LogConfiguration)
	require.Equal(t, "awslogs", c.LogConfiguration.LogDriver)

	svc := s.tpl.GetAllECSServiceResources()["Service"]
	require.NotNil(t, svc)
	require.Equal(t, 1, aws.ToInt(svc.DesiredCount))
	require.Equal(t, 2, aws.ToInt(loadStack(t, fullConfig).tpl.GetAllECSServiceResources()["Service"].DesiredCount), "HA")
}

func TestAlarmsWatchTheDLQHaltsAndHeartbeat(t *testing.T) {
	s := loadStack(t, fullConfig)
	alarms := s.tpl.GetAllCloudWatchAlarmResources()
	type want struct {
		metric, comparison, missing string // metric: namespace/name/statistic, or the Metrics Insights query
		threshold                   float64
	}
	cases := map[string]want{
		"DeadLetterQueueAlarm": {"AWS/SQS/ApproximateNumberOfMessagesVisible/Maximum", "GreaterThanThreshold", "notBreaching", 0},
		// RolloutHalted carries the dimensions Group and Platform: one query over every group.
		"RolloutHaltedAlarm": {`SELECT MAX(` + metrics.RolloutHalted + `) FROM "` + metrics.Namespace + `"`, "GreaterThanThreshold", "notBreaching", 0},
		// AgentHeartbeat carries no dimension; a dead agent sends nothing, so missing data is breaching.
		"HeartbeatMissingAlarm": {metrics.Namespace + "/" + metrics.AgentHeartbeat + "/SampleCount", "LessThanThreshold", "breaching", 1},
	}
	require.ElementsMatch(t, keys(cases), keys(alarms))
	for name, w := range cases {
		a := alarms[name]
		metric := aws.ToString(a.Namespace) + "/" + aws.ToString(a.MetricName) + "/" + aws.ToString(a.Statistic)
		if len(a.Metrics) > 0 {
			require.Len(t, a.Metrics, 1, name)
			require.True(t, aws.ToBool(a.Metrics[0].ReturnData), name)
			require.Equal(t, 300, aws.ToInt(a.Metrics[0].Period), "%s: a Metrics Insights query in an alarm needs its period", name)
			metric = aws.ToString(a.Metrics[0].Expression)
		}
		require.Equal(t, w.metric, metric, name)
		require.Equal(t, w.comparison, a.ComparisonOperator, name)
		require.Equal(t, w.missing, aws.ToString(a.TreatMissingData), name)
		require.Equal(t, w.threshold, *a.Threshold, name)
		require.Equal(t, []string{fullConfig["AlarmTopicArn"]}, a.AlarmActions, name)
	}
	dlq := alarms["DeadLetterQueueAlarm"]
	require.Len(t, dlq.Dimensions, 1)
	require.Equal(t, getAtt("DeadLetterQueue", "QueueName"), dlq.Dimensions[0].Value, "the alarm watches the DLQ, not the queue")

	for name, a := range loadStack(t, defaultConfig).tpl.GetAllCloudWatchAlarmResources() {
		require.Empty(t, a.AlarmActions, "%s: no topic, no actions", name)
	}
}

func TestDashboardBodyIsJSON(t *testing.T) {
	s := loadStack(t, defaultConfig)
	d := s.tpl.GetAllCloudWatchDashboardResources()["Dashboard"]
	require.NotNil(t, d)
	var body struct {
		Widgets []struct {
			Type       string         `json:"type"`
			Properties map[string]any `json:"properties"`
		} `json:"widgets"`
	}
	require.NoError(t, json.Unmarshal([]byte(d.DashboardBody), &body), d.DashboardBody)
	require.NotEmpty(t, body.Widgets)
	for _, w := range body.Widgets {
		require.NotEmpty(t, w.Properties["title"], "every widget has a title")
	}
}

// TestTableHasTheIndexTheStoreQueries: the stack's table and internal/state agree on the sparse index that
// ListRollouts and ListLocks query, and the task role may query it (and nothing else of the index's).
func TestTableHasTheIndexTheStoreQueries(t *testing.T) {
	s := loadStack(t, defaultConfig)
	tbl, err := s.tpl.GetDynamoDBTableWithName("Table")
	require.NoError(t, err)
	require.Len(t, tbl.GlobalSecondaryIndexes, 1)
	ix := tbl.GlobalSecondaryIndexes[0]
	require.Equal(t, state.IndexKind, ix.IndexName)
	require.Len(t, ix.KeySchema, 2)
	require.Equal(t, state.AttrKind, ix.KeySchema[0].AttributeName)
	require.Equal(t, "HASH", ix.KeySchema[0].KeyType)
	require.Equal(t, state.AttrPK, ix.KeySchema[1].AttributeName)
	require.Equal(t, "RANGE", ix.KeySchema[1].KeyType)
	require.NotNil(t, ix.Projection)
	require.Equal(t, "ALL", aws.ToString(ix.Projection.ProjectionType), "the listings decode whole records from the index")
	defined := map[string]bool{}
	for _, a := range tbl.AttributeDefinitions {
		defined[a.AttributeName] = true
	}
	require.True(t, defined[state.AttrKind], "the index key is an attribute definition")

	sts := s.roleStatements(t, "TaskRole")
	index := arnOf("Table") + "/index/" + state.IndexKind
	require.True(t, allows(t, sts, request{"dynamodb:Query", index, nil}), "the task role queries the index")
	require.False(t, allows(t, sts, request{"dynamodb:Scan", index, nil}), "the index is never scanned")
	require.False(t, allows(t, sts, request{"dynamodb:Query", arnOf("Table") + "/index/other", nil}))
}

// TestDashboardGraphsTheWakeUpQueueBesideTheMainQueue: the dashboard's first row graphs the wake-up queue
// with the same SQS metrics as the main queue (visible messages, in flight, age of the oldest), beside it.
func TestDashboardGraphsTheWakeUpQueueBesideTheMainQueue(t *testing.T) {
	s := loadStack(t, defaultConfig)
	d := s.tpl.GetAllCloudWatchDashboardResources()["Dashboard"]
	require.NotNil(t, d)
	var body struct {
		Widgets []struct {
			Y          int `json:"y"`
			Properties struct {
				Title   string  `json:"title"`
				Metrics [][]any `json:"metrics"`
			} `json:"properties"`
		} `json:"widgets"`
	}
	require.NoError(t, json.Unmarshal([]byte(d.DashboardBody), &body), d.DashboardBody)
	// graphed returns the y of the widget whose first metric is the queue's, and that widget's metric names.
	graphed := func(queue string) (int, []string) {
		for _, w := range body.Widgets {
			m := w.Properties.Metrics
			if len(m) == 0 || len(m[0]) < 4 || m[0][0] != "AWS/SQS" || m[0][2] != "QueueName" || !strings.Contains(fmt.Sprint(m[0][3]), queue) {
				continue
			}
			var names []string
			for _, row := range m {
				names = append(names, fmt.Sprint(row[1]))
			}
			return w.Y, names
		}
		t.Fatalf("no widget graphs %s", queue)
		return 0, nil
	}
	mainY, mainMetrics := graphed(getAtt("Queue", "QueueName"))
	wakeY, wakeMetrics := graphed(getAtt("WakeUpQueue", "QueueName"))
	require.Equal(t, mainMetrics, wakeMetrics, "the same graphs as the main queue's")
	require.Subset(t, wakeMetrics, []string{"ApproximateNumberOfMessagesVisible", "ApproximateAgeOfOldestMessage"})
	require.Equal(t, mainY, wakeY, "beside the main queue's")
}
