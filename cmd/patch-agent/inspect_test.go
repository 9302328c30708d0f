//go:build !nodemo

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/operate"
	"github.com/patch-agent/patch-agent/internal/schema"
)

// samples are the events package's real message samples.
const samples = "../../internal/events/testdata"

// `message inspect` says what the agent would do with each kind of message, held by one golden file per
// sample; the disposition of each is asserted here too, so a golden update cannot silently change it.
func TestMessageInspectGivesTheDispositionAndTheAction(t *testing.T) {
	for _, c := range []struct {
		sample      string
		disposition string
		action      string // part of the action
	}{
		{"asg-hook-direct-terminating.json", operate.DispositionHold, "confirms with Auto Scaling that"},
		{"eventbridge-lifecycle-terminate-replace-root-volume.json", operate.DispositionHold, "comes back with a new root volume"},
		{"asg-hook-direct-launching.json", operate.DispositionHold, "completes the launching action (CONTINUE; ABANDON at the deadline)"},
		{"asg-hook-test-notification.json", operate.DispositionIgnore, "none: "},
		{"ssm-parameter-change-update-golden-ami.json", operate.DispositionAct, "once the AMI gate accepts the image"},
		{"ssm-parameter-change-delete.json", operate.DispositionAct, "get no rollout until it exists again"},
		{"ssm-parameter-change-image-validation-failed.json", operate.DispositionIgnore, "failed to validate"},
		{"scheduled-event.json", operate.DispositionAct, "resolves every AMI parameter"},
		{"sns-ecs-ami-update.json", operate.DispositionAct, "resolves every AMI parameter"},
		{"ecs-container-instance-state-change.json", operate.DispositionAct, "looks again at the ECS groups of cluster default now"},
		{"sns-wrapped-asg-hook-terminating.json", operate.DispositionHold, "Terminating:Wait"},
		// An EC2 state change names only its instance: the action names the instance, not an empty cluster.
		{"ec2-instance-state-change-shutting-down.json", operate.DispositionAct, "looks again at the managed group that listed instance i-1234567890abcdef0"},
		{"operator-wakeup-approve.json", operate.DispositionAct, "looks again at group prod-ecs-asg (ignored when the agent does not manage it) now instead of at the next safety poll, re-reading the rollout record"},
	} {
		t.Run(c.sample, func(t *testing.T) {
			res := run(t, "message", "inspect", filepath.Join(samples, c.sample))
			require.NoError(t, res.err, res.stderr)
			var d operate.InspectDocument
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &d))
			require.Equal(t, schema.Version, d.SchemaVersion)
			require.Equal(t, c.disposition, d.Disposition)
			require.Contains(t, d.Action, c.action)
			require.NotContains(t, res.stdout, "0001-01-01", "a time the message does not carry is null")
			goldenFile(t, filepath.Join("testdata", "inspect-"+strings.TrimSuffix(c.sample, ".json")+".golden"), res.stdout)
		})
	}
}

// inspectKeys are the fields of every inspect document, and eventKeys those of its event.
var (
	inspectKeys = []string{"action", "disposition", "error", "event", "schemaVersion", "warning"}
	eventKeys   = []string{"account", "detailType", "envelope", "id", "kind", "lifecycleAction", "parameter", "reason", "region", "source", "time", "topic", "group", "wakeUp"}
)

func TestMessageInspectDocumentHasEveryField(t *testing.T) {
	for _, sample := range []string{"asg-hook-test-notification.json", "ssm-parameter-change-update-golden-ami.json"} {
		res := run(t, "message", "inspect", filepath.Join(samples, sample))
		require.NoError(t, res.err)
		var doc map[string]any
		require.NoError(t, json.Unmarshal([]byte(res.stdout), &doc))
		require.Equal(t, inspectKeys, keysOf(doc))
		require.Equal(t, sorted(eventKeys), keysOf(doc["event"].(map[string]any)))
	}
}

// A malformed message — here one that names its lifecycle action token twice, which JSON readers resolve
// differently — is dead-lettered: the document says so and the exit status is 1.
func TestMessageInspectDeadLettersAMessageWithADuplicateMember(t *testing.T) {
	body, err := os.ReadFile(filepath.Join(samples, "asg-hook-direct-terminating.json"))
	require.NoError(t, err)
	dup := strings.Replace(string(body), "{", `{"LifecycleActionToken":"00000000-0000-0000-0000-000000000000",`, 1)
	file := filepath.Join(t.TempDir(), "dup.json")
	require.NoError(t, os.WriteFile(file, []byte(dup), 0o600))

	res := run(t, "message", "inspect", file)
	requireExitCode(t, res.err, 1)
	require.ErrorContains(t, res.err, `member "LifecycleActionToken" appears twice`)
	require.Equal(t, 1, strings.Count(res.err.Error(), "malformed message"), "said once: %v", res.err)
	var d operate.InspectDocument
	require.NoError(t, json.Unmarshal([]byte(res.stdout), &d))
	require.Equal(t, operate.DispositionDeadLetter, d.Disposition)
	require.Nil(t, d.Event)
	require.Contains(t, d.Action, "dead-letter queue")
}

// --topic takes SNS topic ARNs only: anything else is a usage error, refused before the message is read.
func TestMessageInspectRefusesATopicThatIsNotAnSNSTopicARN(t *testing.T) {
	file := filepath.Join(samples, "sns-wrapped-asg-hook-terminating.json")
	for _, topic := range []string{
		"not-an-arn",
		"asg-lifecycle",
		"arn:aws:sqs:us-east-1:111122223333:asg-lifecycle",
		"arn:aws:sns:us-east-1:11112222333:asg-lifecycle",
		"arn:aws:sns:us-east-1:111122223333:",
		"arn:aws:sns:us-east-1:111122223333:asg lifecycle",
		"arn:aws:sns::111122223333:asg-lifecycle",
	} {
		t.Run(topic, func(t *testing.T) {
			res := run(t, "message", "inspect", file, "--topic", "arn:aws:sns:us-east-1:111122223333:asg-lifecycle", "--topic", topic)
			var stderr strings.Builder
			require.Equal(t, cli.ExitUsage, cli.Report(&stderr, res.err), "%v", res.err)
			require.Empty(t, res.stdout, "refused before the message is read")
			require.Contains(t, stderr.String(), fmt.Sprintf("--topic %q is not an SNS topic ARN", topic))
			require.Contains(t, stderr.String(), "arn:<partition>:sns:<region>:<12-digit account>:<topic name>")
			require.Contains(t, stderr.String(), "Run 'patch-agent message inspect --help' for usage.")
		})
	}
	for _, topic := range []string{"arn:aws-cn:sns:cn-north-1:111122223333:asg_lifecycle", "arn:aws-us-gov:sns:us-gov-west-1:111122223333:orders.fifo"} {
		res := run(t, "message", "inspect", file, "--topic", topic)
		require.NoError(t, res.err, topic)
	}
}

// --topic: a notification from another SNS topic is flagged.
func TestMessageInspectChecksTheSNSTopicWhenOneIsConfigured(t *testing.T) {
	file := filepath.Join(samples, "sns-wrapped-asg-hook-terminating.json")
	for _, c := range []struct {
		name, topic, warning string
	}{
		{"no topic configured", "", ""},
		{"the configured topic", "arn:aws:sns:us-east-1:111122223333:asg-lifecycle", ""},
		{"another topic", "arn:aws:sns:us-east-1:111122223333:patch-agent", "delivered by SNS topic arn:aws:sns:us-east-1:111122223333:asg-lifecycle, not by the configured arn:aws:sns:us-east-1:111122223333:patch-agent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := []string{"message", "inspect", file}
			if c.topic != "" {
				args = append(args, "--topic", c.topic)
			}
			res := run(t, args...)
			require.NoError(t, res.err)
			var d operate.InspectDocument
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &d))
			if c.warning == "" {
				require.Empty(t, d.Warning)
			} else {
				require.Contains(t, d.Warning, c.warning)
			}
		})
	}
}

// requirePrintable fails when out holds a character that is neither printable nor a line feed: a control
// character or escape sequence from a message would act on the operator's terminal.
func requirePrintable(t *testing.T, out string) {
	t.Helper()
	for i, r := range out {
		require.True(t, r == '\n' || strconv.IsPrint(r), "character %U at byte %d of %q", r, i, out)
	}
}

// A message is untrusted (a dead-letter queue's body, say): `message inspect` prints its strings with their
// control characters, escape sequences and line breaks escaped, in every format and on standard error, so
// they reach the operator's terminal as text. Ordinary names print unchanged.
func TestMessageInspectPrintsAMessagesControlCharactersEscaped(t *testing.T) {
	for _, c := range []struct {
		name   string
		body   string
		format string
		want   string                                 // a line of the output
		value  string                                 // the message's string
		got    func(d operate.InspectDocument) string // where the JSON document has it
	}{
		{
			name:   "test notification whose group clears the screen",
			body:   `{"AccountId":"111122223333","RequestId":"r-1","AutoScalingGroupName":"g\u001b[2J\u001b[31mEVIL","Service":"AWS Auto Scaling","Event":"autoscaling:TEST_NOTIFICATION","Time":"2019-02-20T20:01:15.747Z"}`,
			format: "wide",
			want:   `group:       "g\x1b[2J\x1b[31mEVIL"`,
			value:  "g\x1b[2J\x1b[31mEVIL",
			got:    func(d operate.InspectDocument) string { return d.Event.Group },
		},
		{
			name:   "parameter change whose name sets the terminal's title",
			body:   `{"version":"0","id":"eb-1","detail-type":"Parameter Store Change","source":"aws.ssm","account":"111122223333","time":"2024-05-22T16:44:48Z","region":"us-east-2","resources":[],"detail":{"operation":"Update","name":"/ami\u001b]0;pwned\u0007","type":"String"}}`,
			format: "table",
			want:   `action:      "resolves /ami\x1b]0;pwned\a and rolls`,
			value:  "/ami\x1b]0;pwned\a",
			got:    func(d operate.InspectDocument) string { return d.Event.Parameter.Name },
		},
		{
			name:   "EventBridge event whose detail-type carries a C1 control (CSI to some terminals)",
			body:   `{"version":"0","id":"eb-2","detail-type":"Spot\u009b2JWarning","source":"aws.ec2","account":"111122223333","time":"2024-01-13T00:12:37Z","region":"us-west-2","resources":[],"detail":{}}`,
			format: "wide",
			want:   `detail type: "Spot\u009b2JWarning"`,
			value:  "Spot\u009b2JWarning",
			got:    func(d operate.InspectDocument) string { return d.Event.DetailType },
		},
		{
			name:   "malformed lifecycle action whose group name forges a line",
			body:   `{"LifecycleHookName":"h","AutoScalingGroupName":"asg\nerror:       none","EC2InstanceId":"i-1","LifecycleActionToken":"tok","LifecycleTransition":"autoscaling:EC2_INSTANCE_LAUNCH"}`,
			format: "table",
			want:   `error:       "malformed message: lifecycle action for instance i-1 in group asg\nerror:       none: LifecycleTransition`,
			value:  "in group asg\nerror:       none: ",
			got:    func(d operate.InspectDocument) string { return d.Error },
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := runCtx(t, context.Background(), c.body, "message", "inspect", "-o", c.format)
			requirePrintable(t, res.stdout)
			require.Contains(t, "\n"+res.stdout, "\n"+c.want)
			if res.err != nil {
				requirePrintable(t, res.err.Error())
				require.NotContains(t, res.err.Error(), "\n")
			}
			for _, l := range strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n") {
				require.Regexp(t, `^(disposition|action|warning|error|kind|envelope|source|detail type|group|time): +\S`, l, "one field a line")
			}

			// JSON, the default: encoding/json escapes U+0000-U+001F; the rest is escaped too, and the
			// document still decodes to the message's strings.
			res = runCtx(t, context.Background(), c.body, "message", "inspect")
			requirePrintable(t, res.stdout)
			var d operate.InspectDocument
			require.NoError(t, json.Unmarshal([]byte(res.stdout), &d))
			require.Contains(t, c.got(d), c.value)
		})
	}

	// Ordinary names, non-ASCII ones included, print as they are.
	res := run(t, "message", "inspect", "-o", "wide", filepath.Join(samples, "asg-hook-direct-terminating.json"))
	require.NoError(t, res.err)
	require.Contains(t, res.stdout, "\ngroup:       ecs-prod-cluster-asg\n")
	require.Contains(t, res.stdout, "action:      if group ecs-prod-cluster-asg is opted in:")
	require.Equal(t, "ecs-prod-ünïcode-asg", operate.Printable("ecs-prod-ünïcode-asg"))
	require.Equal(t, `"a\u202eb"`, operate.Printable("a\u202eb"), "a bidirectional override is escaped")
	require.Equal(t, `"\xff"`, operate.Printable("\xff"), "invalid UTF-8 is escaped")
}
