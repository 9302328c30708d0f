//go:build !nodemo

package main

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/cli/operate"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

const testQueueURL = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent"

// fakeSender records the wake-ups sent, and what the state file held at the moment of each send.
type fakeSender struct {
	file   string
	err    error
	bodies []string
	atSend []string
	queues []string
}

func (f *fakeSender) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	b, _ := os.ReadFile(f.file)
	f.atSend = append(f.atSend, string(b))
	f.bodies = append(f.bodies, aws.ToString(in.MessageBody))
	f.queues = append(f.queues, aws.ToString(in.QueueUrl))
	if f.err != nil {
		return nil, f.err
	}
	return &sqs.SendMessageOutput{MessageId: aws.String("m-1")}, nil
}

// useSender makes the operator commands send through f for the rest of the test.
func useSender(t *testing.T, f *fakeSender) {
	t.Helper()
	prev := operate.NewQueueSender
	operate.NewQueueSender = func(context.Context, *aws.Config, string) (awsapi.OperatorQueue, error) { return f, nil }
	t.Cleanup(func() { operate.NewQueueSender = prev })
}

// TestOperatorCommandsWakeTheAgentAfterTheirWrite: approve, rollback, pause (a group's and the global) and
// resume send one operator wake-up to --queue-url naming the action, the target and who, and only after their
// write is durable (the state file already holds the change when the message is sent).
func TestOperatorCommandsWakeTheAgentAfterTheirWrite(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, file string)
		args  []string
		want  events.OperatorWakeUp
	}{
		{"approve", func(t *testing.T, file string) { waitForApproval(t, file, testworld.GroupName) },
			[]string{"approve", testworld.GroupName, "--who", "carol"}, events.OperatorWakeUp{Action: events.OperatorApprove, Group: testworld.GroupName, Who: "carol"}},
		{"rollback", nil, []string{"rollback", testworld.GroupName, "--yes", "--who", "carol"},
			events.OperatorWakeUp{Action: events.OperatorRollback, Group: testworld.GroupName, Who: "carol"}},
		{"pause of a group", nil, []string{"pause", "--group", testworld.GroupName, "--reason", "load test", "--until", "2h", "--who", "carol"},
			events.OperatorWakeUp{Action: events.OperatorPause, Group: testworld.GroupName, Who: "carol"}},
		{"global pause", nil, []string{"pause", "--reason", "incident", "--who", "carol"},
			events.OperatorWakeUp{Action: events.OperatorPause, Scope: events.OperatorGlobal, Who: "carol"}},
		{"resume", func(t *testing.T, file string) {
			require.NoError(t, run(t, "pause", "--reason", "incident", "--who", "carol", "--state-file", file).err)
		}, []string{"resume"}, events.OperatorWakeUp{Action: events.OperatorResume, Scope: events.OperatorGlobal, Who: "tester"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := demoState(t)
			if tc.setup != nil {
				tc.setup(t, file)
			}
			before := readFile(t, file)
			f := &fakeSender{file: file}
			useSender(t, f)
			res := run(t, append(tc.args, "--state-file", file, "--queue-url", testQueueURL)...)
			require.NoError(t, res.err, res.stderr)
			require.Contains(t, res.stdout, "Woke the agent: it looks at the change within seconds.")
			require.Len(t, f.bodies, 1, "one wake-up")
			require.Equal(t, testQueueURL, f.queues[0])
			after := readFile(t, file)
			require.NotEqual(t, before, after, "the command wrote its change")
			require.Equal(t, after, f.atSend[0], "the wake-up was sent after the write was durable")
			ev, err := events.Parse([]byte(f.bodies[0]))
			require.NoError(t, err)
			require.Equal(t, events.KindOperatorWakeUp, ev.Kind)
			want := tc.want
			if tc.name == "resume" {
				want.Who = ev.Operator.Who // resume records no one: $USER@hostname
				require.Contains(t, want.Who, "tester")
			}
			require.Equal(t, &want, ev.Operator)
			require.Equal(t, "eu-west-1", ev.Region)
			require.Equal(t, "111122223333", ev.Account)
		})
	}
}

// TestOperatorCommandSucceedsAndWarnsWhenTheWakeUpFails: the DynamoDB (here: state file) write is the
// command's effect; a wake-up that cannot be sent is a warning on stderr saying the agent acts at its next
// safety poll, and the command still exits 0 with its change written. Without --queue-url nothing is sent and
// one line says so: on a state file, that no agent reads it and where the change shows.
func TestOperatorCommandSucceedsAndWarnsWhenTheWakeUpFails(t *testing.T) {
	file := demoState(t)
	waitForApproval(t, file, testworld.GroupName)
	before := readFile(t, file)
	f := &fakeSender{file: file, err: errors.New("AccessDenied: not authorized to perform sqs:SendMessage")}
	useSender(t, f)
	res := run(t, "approve", testworld.GroupName, "--who", "carol", "--state-file", file, "--queue-url", testQueueURL)
	require.NoError(t, res.err, "a failed wake-up does not fail the command")
	require.Contains(t, res.stderr, "warning: the change is recorded, but waking the agent failed (sending the wake-up to "+testQueueURL+": AccessDenied")
	require.Contains(t, res.stderr, "the agent acts on it at its next safety poll")
	require.NotContains(t, res.stdout, "Woke the agent")
	require.NotEqual(t, before, readFile(t, file), "the approval is written")
	require.Contains(t, status(t, file).Reason, "approval", "status still reads the group")

	f.err, f.bodies = nil, nil
	res = run(t, "pause", "--group", testworld.GroupName, "--reason", "x", "--who", "carol", "--state-file", file)
	require.NoError(t, res.err, res.stderr)
	require.Empty(t, f.bodies, "no --queue-url: nothing sent")
	require.Contains(t, res.stdout, "Not woken: no agent reads a state file; the change is in state file "+file+
		", and patch-agent status --state-file "+cli.ShellQuote(file)+" shows it.\n")
	require.NotContains(t, res.stdout, "--queue-url", "no queue reaches a state file")
	require.NotContains(t, res.stdout, "safety poll", "no agent polls a state file")
}

// Without --queue-url, on the agent's table, the line says when the agent acts and how to wake it now.
func TestWithoutAQueueTheAgentOfATableActsAtItsNextSafetyPoll(t *testing.T) {
	var out strings.Builder
	cmd := &cobra.Command{}
	cmd.SetOut(&out)
	(&operate.WakeFlags{}).Wake(cmd, &cli.OpenedStore{Where: "table patch-agent (region eu-west-1)"}, events.OperatorWakeUp{Action: events.OperatorPause})
	require.Equal(t, "Not woken: the agent acts on it at its next safety poll (up to its --reconcile-interval, 2 minutes with wake-up events);"+
		" pass --queue-url (or set PATCH_AGENT_WAKE_UP_QUEUE_URL) to wake it now.\n", out.String())
}

// TestOperatorWakeUpGoesToTheWakeUpQueueWhenTheStackHasOne: by default the operator
// commands send their wake-up to the wake-up queue (PATCH_AGENT_WAKE_UP_QUEUE_URL), so that no burst of them
// delays a lifecycle action on the main queue; a stack without a wake-up queue gets the main queue.
func TestOperatorWakeUpGoesToTheWakeUpQueueWhenTheStackHasOne(t *testing.T) {
	const wakeURL = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent-wake-up"
	tests := []struct {
		name, main, wake, want string
	}{
		{"both queues: the wake-up queue", testQueueURL, wakeURL, wakeURL},
		{"no wake-up queue: the main queue", testQueueURL, "", testQueueURL},
		{"neither: not woken", "", "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(config.EnvQueueURL, tc.main)
			t.Setenv(config.EnvWakeUpQueueURL, tc.wake)
			f := operate.AddWakeFlag(&cobra.Command{Use: "approve"})
			require.Equal(t, tc.want, f.QueueURL)
		})
	}
}

// TestOperatorWakeUpThroughTheFaultInjectorIsAWarningAfterTheDurableWrite: the CLI's SendMessage goes through
// awsapi.OperatorQueue like every other AWS call, so the simulated account's fault injector reaches it. A
// fault on it (throttling, a 5xx, a timeout, access denied, a response lost after the send) is a warning on
// stderr; the command exits 0 with its write in the state file. Without a fault the wake-up is on the queue.
func TestOperatorWakeUpThroughTheFaultInjectorIsAWarningAfterTheDurableWrite(t *testing.T) {
	tests := []struct {
		name      string
		rule      *sim.FaultRule
		wantQueue int // messages on the queue afterwards
	}{
		{"no fault: the wake-up is sent", nil, 1},
		{"throttled", &sim.FaultRule{Op: "sqs:SendMessage", Every: 1, Codes: []string{sim.FaultThrottling}}, 0},
		{"a 5xx", &sim.FaultRule{Op: "sqs:SendMessage", Every: 1, Codes: []string{sim.FaultInternalFailure}}, 0},
		{"a timeout", &sim.FaultRule{Op: "sqs:SendMessage", Every: 1, Codes: []string{sim.FaultTimeout}}, 0},
		{"access denied", &sim.FaultRule{Op: "sqs:SendMessage", Every: 1, Codes: []string{"AccessDenied"}}, 0},
		{"the response lost after the send", &sim.FaultRule{Op: "sqs:SendMessage", Every: 1, Codes: []string{sim.FaultInternalFailure}, ResponseLost: true}, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			file := demoState(t)
			acct := sim.New(testingclock.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)), sim.Options{Region: "eu-west-1", AccountID: "111122223333"})
			url := acct.CreateQueue("patch-agent-wake-up", 0, "")
			var rules []sim.FaultRule
			if tc.rule != nil {
				rules = append(rules, *tc.rule)
			}
			faults := sim.NewFaults(1, nil, rules...)
			prev := operate.NewQueueSender
			operate.NewQueueSender = func(context.Context, *aws.Config, string) (awsapi.OperatorQueue, error) {
				return faults.OperatorQueue(acct.OperatorQueue()), nil
			}
			t.Cleanup(func() { operate.NewQueueSender = prev })
			before := readFile(t, file)

			res := run(t, "pause", "--group", testworld.GroupName, "--reason", "game day", "--who", "carol", "--state-file", file, "--queue-url", url)
			require.NoError(t, res.err, "a failed wake-up does not fail the command: %s", res.stderr)
			require.NotEqual(t, before, readFile(t, file), "the pause is written")
			require.NotNil(t, status(t, file).Paused, "and durable")
			visible, _ := acct.QueueDepth(url)
			require.Equal(t, tc.wantQueue, visible)
			require.Equal(t, 1, faults.Stats().Calls["sqs:SendMessage"], "one send, never retried by the command")
			if tc.rule == nil {
				require.Contains(t, res.stdout, "Woke the agent")
				require.Empty(t, res.stderr)
				return
			}
			require.Contains(t, res.stderr, "warning: the change is recorded, but waking the agent failed (sending the wake-up to "+url)
			require.Contains(t, res.stderr, "the agent acts on it at its next safety poll")
			require.NotContains(t, res.stdout, "Woke the agent")
		})
	}
}
