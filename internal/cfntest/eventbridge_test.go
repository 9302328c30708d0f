package cfntest

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

// fixtureDir holds real payloads (copied from the project's shared fixtures): every message kind the queue
// can receive.
const fixtureDir = "testdata/events"

// routes says which fixtures each rule of the template delivers, with fullConfig (AMIParameterNames
// /golden-ami/ecs/al2023, MyExampleParameter, MyGoldenAMI; prefix /golden-ami/; lifecycle rule on), and the
// kind the agent reads them as. The update of /golden-ami/ecs/al2023 is both named and under the prefix, so
// two rules deliver it; the agent deduplicates on the event id.
var routes = map[string]struct {
	kind     events.Kind
	fixtures []string
}{
	"ParameterNamesRule": {events.KindParameterChange, []string{
		"ssm-parameter-change-create.json",                  // MyExampleParameter, Create
		"ssm-parameter-change-delete.json",                  // MyExampleParameter, Delete
		"ssm-parameter-change-image-validation-failed.json", // MyGoldenAMI, Create with exception
		"ssm-parameter-change-update-golden-ami.json",       // /golden-ami/ecs/al2023, Update
	}},
	"ParameterPrefixRule": {events.KindParameterChange, []string{
		"ssm-parameter-change-update-golden-ami.json",
	}},
	// A schedule rule has no pattern: EventBridge itself emits the Scheduled Event to its targets. kumo does
	// not run schedules, and treats a rule without a pattern as matching every event, so the test stands in
	// a rule with the pattern of what the schedule emits (source aws.events, detail-type Scheduled Event).
	// That proves the delivery path of the tick, and that no pattern rule of the stack also catches it.
	"ScheduleRule": {events.KindScheduledTick, []string{
		"scheduled-event.json",
	}},
	"LifecycleActionRule": {events.KindLifecycleAction, []string{
		"eventbridge-lifecycle-launch.json",
		"eventbridge-lifecycle-terminate.json",
		"eventbridge-lifecycle-terminate-replace-root-volume.json",
	}},
	// Wake-up events: the events that end a rollout's waits.
	"ScalingResultRule": {events.KindWakeUp, []string{
		"instance-launch-successful.json",
		"instance-launch-unsuccessful.json",
		"instance-terminate-successful.json",
		"instance-terminate-unsuccessful.json",
	}},
	"InstanceLeavingRule": {events.KindWakeUp, []string{
		"ec2-instance-state-change-shutting-down.json",
	}},
	"ContainerInstanceDrainingRule": {events.KindWakeUp, []string{
		"ecs-container-instance-state-change-draining.json",
	}},
	"ContainerInstanceRegisteredRule": {events.KindWakeUp, []string{
		"ecs-container-instance-registered.json",
	}},
}

// unrouted are EventBridge events that reach the default bus of an account but no rule of the stack may
// deliver: the agent would only ignore them, or (wake-ups) they are the churn the wake-up rules leave out.
var unrouted = []string{
	"ec2-instance-state-change-pending.json",   // every instance of the account starting: not a wait's end
	"ecs-container-instance-state-change.json", // an ACTIVE instance whose resources changed: task churn
	"instance-refresh-checkpoint.json",
}

// notEventBridge are messages the queue receives without EventBridge; the rules never see them, so they are
// not put on the bus.
var notEventBridge = map[string]string{
	"asg-hook-direct-launching.json":        "sent by a lifecycle hook whose notification target is the queue",
	"asg-hook-direct-terminating.json":      "sent by a lifecycle hook whose notification target is the queue",
	"asg-hook-test-notification.json":       "sent once by a new hook to its notification target",
	"sns-ecs-ami-update.json":               "SNS notification (topic subscription), not an EventBridge event",
	"sns-envelope-generic.json":             "SNS notification (topic subscription), not an EventBridge event",
	"sns-wrapped-asg-hook-terminating.json": "SNS notification (topic subscription), not an EventBridge event",
}

// nearMisses are Parameter Store Change events that no rule may deliver, made from
// ssm-parameter-change-update-golden-ami.json by changing the name or the operation: the fixtures alone
// cannot show that a pattern is not broader than it should be.
var nearMisses = []struct{ name, parameter, operation string }{
	{"a name that only starts like the prefix", "/golden-amis/ecs/al2023", "Update"},
	{"a name elsewhere in the hierarchy", "/prod/db/password", "Update"},
	{"a name that only starts like a listed one", "MyGoldenAMI-old", "Create"},
	{"a listed name without its leading slash", "golden-ami/ecs/al2023", "Update"},
	{"an operation other than Create, Update, Delete", "/golden-ami/ecs/al2023", "LabelParameterVersion"},
}

// scheduleStandIn is the pattern of the events a schedule rule emits.
const scheduleStandIn = `{"source":["aws.events"],"detail-type":["Scheduled Event"]}`

// fixture is an EventBridge-shaped fixture.
type fixture struct {
	name  string
	entry ebtypes.PutEventsRequestEntry
	key   string // identifies the event once delivered (kumo gives it a new id and time)
}

// eventKey identifies an event by source, detail-type and canonical detail.
func eventKey(t testing.TB, body []byte) string {
	t.Helper()
	var e struct {
		Source     string          `json:"source"`
		DetailType string          `json:"detail-type"`
		Detail     json.RawMessage `json:"detail"`
	}
	require.NoError(t, json.Unmarshal(body, &e))
	var detail any
	require.NoError(t, json.Unmarshal(e.Detail, &detail))
	canonical, err := json.Marshal(detail)
	require.NoError(t, err)
	return e.Source + "\x00" + e.DetailType + "\x00" + string(canonical)
}

// loadFixtures reads every fixture, checks that each is classified (routed, unrouted or not EventBridge, by
// its shape) and returns the EventBridge-shaped ones, followed by the near misses.
func loadFixtures(t testing.TB) []fixture {
	t.Helper()
	entries, err := os.ReadDir(fixtureDir)
	require.NoError(t, err)
	routed := map[string]bool{}
	for _, r := range routes {
		for _, f := range r.fixtures {
			routed[f] = true
		}
	}
	var out []fixture
	keys := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		body, err := os.ReadFile(filepath.Join(fixtureDir, name))
		require.NoError(t, err)
		var obj map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(body, &obj), name)
		_, hasSource := obj["source"]
		_, hasDetailType := obj["detail-type"]
		isEventBridge := hasSource && hasDetailType
		_, direct := notEventBridge[name]
		switch {
		case direct:
			require.Falsef(t, isEventBridge, "%s is listed as not an EventBridge event but has source and detail-type", name)
			continue
		case routed[name], slices.Contains(unrouted, name):
			require.Truef(t, isEventBridge, "%s is not an EventBridge event", name)
		default:
			t.Fatalf("fixture %s is not classified: add it to routes, unrouted or notEventBridge", name)
		}
		var ev struct {
			Source     string          `json:"source"`
			DetailType string          `json:"detail-type"`
			Time       time.Time       `json:"time"`
			Resources  []string        `json:"resources"`
			Detail     json.RawMessage `json:"detail"`
		}
		require.NoError(t, json.Unmarshal(body, &ev), name)
		f := fixture{name: name, key: eventKey(t, body), entry: ebtypes.PutEventsRequestEntry{
			Source: aws.String(ev.Source), DetailType: aws.String(ev.DetailType), Detail: aws.String(string(ev.Detail)),
			Resources: ev.Resources, Time: aws.Time(ev.Time),
		}}
		require.NotContainsf(t, keys, f.key, "%s and %s are the same event; the test cannot tell them apart", name, keys[f.key])
		keys[f.key] = name
		out = append(out, f)
	}
	for f := range routed {
		require.Containsf(t, keys, keyOf(out, f), "routed fixture %s is missing from %s", f, fixtureDir)
	}

	base := out[slices.IndexFunc(out, func(f fixture) bool { return f.name == "ssm-parameter-change-update-golden-ami.json" })]
	for _, m := range nearMisses {
		var detail map[string]any
		require.NoError(t, json.Unmarshal([]byte(aws.ToString(base.entry.Detail)), &detail))
		detail["name"], detail["operation"] = m.parameter, m.operation
		b, err := json.Marshal(detail)
		require.NoError(t, err)
		f := fixture{name: "near miss: " + m.name, entry: base.entry}
		f.entry.Detail = aws.String(string(b))
		body, err := json.Marshal(map[string]any{"source": *f.entry.Source, "detail-type": *f.entry.DetailType, "detail": detail})
		require.NoError(t, err)
		f.key = eventKey(t, body)
		require.NotContainsf(t, keys, f.key, "%s repeats %s", f.name, keys[f.key])
		keys[f.key] = f.name
		out = append(out, f)
	}
	return out
}

func keyOf(fs []fixture, name string) string {
	for _, f := range fs {
		if f.name == name {
			return f.key
		}
	}
	return ""
}

func TestRulePatternsDeliverExactlyTheRelevantEvents(t *testing.T) {
	endpoint := testenv.Kumo(t)
	ctx := testenv.Context(t)
	cfg := testenv.AWSConfig(endpoint)
	eb, sq := eventbridge.NewFromConfig(cfg), sqs.NewFromConfig(cfg)

	s := loadStack(t, fullConfig)
	fixtures := loadFixtures(t)
	byKey := map[string]string{}
	for _, f := range fixtures {
		byKey[f.key] = f.name
	}
	rules := s.tpl.GetAllEventsRuleResources()
	require.ElementsMatch(t, keys(routes), keys(rules), "every rule of the template has its expected deliveries here")

	// A bus of this test's own: other tests on the shared kumo put rules on the default bus.
	bus := testenv.UniqueName(t, "patch-agent")
	_, err := eb.CreateEventBus(ctx, &eventbridge.CreateEventBusInput{Name: aws.String(bus)})
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = eb.DeleteEventBus(ctx, &eventbridge.DeleteEventBusInput{Name: aws.String(bus)}) })

	queues := map[string]string{} // rule id -> queue URL
	for _, id := range keys(rules) {
		r := rules[id]
		var pattern string
		switch {
		case r.EventPattern != nil:
			require.Nilf(t, r.ScheduleExpression, "rule %s has a pattern and a schedule", id)
			b, err := json.Marshal(r.EventPattern)
			require.NoError(t, err)
			pattern = string(b)
		case r.ScheduleExpression != nil:
			require.Equal(t, "rate(10 minutes)", *r.ScheduleExpression, "default schedule")
			pattern = scheduleStandIn
		default:
			t.Fatalf("rule %s has neither a pattern nor a schedule", id)
		}
		t.Logf("rule %s: %s", id, pattern)

		q, err := sq.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(testenv.UniqueName(t, id))})
		require.NoError(t, err)
		queues[id] = aws.ToString(q.QueueUrl)
		attrs, err := sq.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: q.QueueUrl,
			AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn}})
		require.NoError(t, err)
		queueArn := attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
		require.NotEmpty(t, queueArn)

		name := testenv.UniqueName(t, id)
		_, err = eb.PutRule(ctx, &eventbridge.PutRuleInput{Name: aws.String(name), EventBusName: aws.String(bus),
			EventPattern: aws.String(pattern), State: ebtypes.RuleStateEnabled})
		require.NoError(t, err, "rule %s: pattern %s", id, pattern)
		out, err := eb.PutTargets(ctx, &eventbridge.PutTargetsInput{Rule: aws.String(name), EventBusName: aws.String(bus),
			Targets: []ebtypes.Target{{Id: aws.String("queue"), Arn: aws.String(queueArn)}}})
		require.NoError(t, err)
		require.Zero(t, out.FailedEntryCount)
		t.Cleanup(func() {
			_, _ = eb.RemoveTargets(ctx, &eventbridge.RemoveTargetsInput{Rule: aws.String(name), EventBusName: aws.String(bus), Ids: []string{"queue"}})
			_, _ = eb.DeleteRule(ctx, &eventbridge.DeleteRuleInput{Name: aws.String(name), EventBusName: aws.String(bus)})
			_, _ = sq.DeleteQueue(ctx, &sqs.DeleteQueueInput{QueueUrl: q.QueueUrl})
		})
	}

	// Real EventBridge refuses PutEvents with an "aws." source (only AWS services emit those); kumo accepts
	// them, which is what lets the real payloads be replayed here. PutEvents takes at most 10 entries.
	for batch := range slices.Chunk(fixtures, 10) {
		entries := make([]ebtypes.PutEventsRequestEntry, len(batch))
		for i, f := range batch {
			entries[i] = f.entry
			entries[i].EventBusName = aws.String(bus)
		}
		out, err := eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: entries})
		require.NoError(t, err)
		require.Zerof(t, out.FailedEntryCount, "kumo rejected events: %+v", out.Entries)
	}

	t.Run("deliveries", func(t *testing.T) {
		for _, id := range keys(routes) {
			t.Run(id, func(t *testing.T) {
				t.Parallel()
				want := slices.Clone(routes[id].fixtures)
				sort.Strings(want)
				bodies := receive(t, sq, queues[id], len(want))
				var got []string
				for _, b := range bodies {
					name, known := byKey[eventKey(t, b)]
					require.Truef(t, known, "rule %s delivered an event that is no fixture: %s", id, b)
					got = append(got, name)
					ev, err := events.Parse(b)
					require.NoErrorf(t, err, "the agent cannot read what rule %s delivers: %s", id, b)
					require.Equalf(t, routes[id].kind, ev.Kind, "rule %s delivers %s", id, name)
				}
				sort.Strings(got)
				require.Equal(t, want, got, "rule %s", id)
			})
		}
	})
}

// receive long-polls a queue until it has want messages, then once more for anything extra, within 15 s;
// it deletes what it receives and returns the bodies.
func receive(t *testing.T, sq *sqs.Client, url string, want int) [][]byte {
	t.Helper()
	ctx := testenv.Context(t)
	deadline := time.Now().Add(15 * time.Second)
	var bodies [][]byte
	for extra := false; time.Now().Before(deadline); {
		out, err := sq.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		require.NoError(t, err)
		for _, m := range out.Messages {
			bodies = append(bodies, bytes.Clone([]byte(aws.ToString(m.Body))))
			_, err := sq.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle})
			require.NoError(t, err)
		}
		if len(bodies) >= want {
			if extra && len(out.Messages) == 0 {
				break
			}
			extra = true // one more poll: a second delivery of the same event, or an unexpected one
		}
	}
	return bodies
}
