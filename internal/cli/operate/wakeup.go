package operate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/cobra"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/cli"
	"github.com/patch-agent/patch-agent/internal/config"
	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/providers"
)

// NewQueueSender builds the SQS client of the wake-up from the store's AWS configuration (nil for a state
// file: the default chain, in region); a test replaces it.
var NewQueueSender = func(ctx context.Context, cfg *aws.Config, region string) (awsapi.OperatorQueue, error) {
	if cfg == nil {
		loaded, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(region), cli.QuietSDK,
			awsconfig.WithRetryer(func() aws.Retryer { return retry.NewStandard() }))
		if err != nil {
			return nil, fmt.Errorf("loading AWS credentials and configuration: %w", err)
		}
		cfg = &loaded
	}
	return sqs.NewFromConfig(*cfg), nil
}

// WakeFlags is --queue-url of the operator commands that change what the agent should do now (approve,
// rollback, pause, resume): after their DynamoDB write they send an operator wake-up
// (events.KindOperatorWakeUp) to the agent's wake-up queue — or, for a stack without one, its main queue —
// so that the agent looks at the target within seconds instead of at its next safety poll.
type WakeFlags struct {
	QueueURL string
}

// AddWakeFlag registers --queue-url. Its default is the wake-up queue (PATCH_AGENT_WAKE_UP_QUEUE_URL, the
// stack's output WakeUpQueueUrl), so that a burst of operator wake-ups never delays a lifecycle action on the
// main queue; without it the main queue (PATCH_AGENT_QUEUE_URL), as for `run`.
func AddWakeFlag(cmd *cobra.Command) *WakeFlags {
	d := config.Default()
	f := &WakeFlags{QueueURL: d.WakeUpQueueURL}
	if f.QueueURL == "" {
		f.QueueURL = d.QueueURL
	}
	cmd.Flags().StringVar(&f.QueueURL, "queue-url", f.QueueURL, "the agent's wake-up queue (stack output WakeUpQueueUrl, env "+config.EnvWakeUpQueueURL+
		") or, for a stack without one, its main queue (env "+config.EnvQueueURL+"): wake the agent for this change now; without it the agent acts at its next safety poll")
	return f
}

// queueRegion is the region in the host of an SQS queue URL (https://sqs.eu-west-1.amazonaws.com/...).
var queueRegion = regexp.MustCompile(`^sqs\.([a-z0-9-]+)\.amazonaws\.com(\.cn)?$`)

// Wake sends the operator wake-up o to the agent's queue after the command's durable write, and prints one
// line on stdout saying when the agent acts. It never fails the command: the DynamoDB write is the effect,
// and the wake-up only makes the agent see it sooner. Without --queue-url it says the agent acts at its next
// safety poll — or, on a state file, that no agent reads the file and status shows the change there; a failed
// send is a warning on stderr saying the same.
func (f *WakeFlags) Wake(cmd *cobra.Command, s *cli.OpenedStore, o events.OperatorWakeUp) {
	out := cmd.OutOrStdout()
	later := "the agent acts on it at its next safety poll (up to its --reconcile-interval, 2 minutes with wake-up events)"
	if strings.TrimSpace(f.QueueURL) == "" && s != nil && s.Mem != nil {
		fmt.Fprintf(out, "Not woken: no agent reads a state file; the change is in %s, and %s shows it.\n", s.Where,
			cli.Pasteable(cmd, cli.Command(cmd, "status"), "patch-agent status"))
		return
	}
	if strings.TrimSpace(f.QueueURL) == "" {
		fmt.Fprintf(out, "Not woken: %s; pass --queue-url (or set %s) to wake it now.\n", later, config.EnvWakeUpQueueURL)
		return
	}
	if err := f.send(cmd.Context(), s, o); err != nil {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: the change is recorded, but waking the agent failed (%v); %s\n", err, later)
		return
	}
	fmt.Fprintln(out, "Woke the agent: it looks at the change within seconds.")
}

// send builds and sends the wake-up. Errors: a queue URL that is not one, the client, SendMessage.
func (f *WakeFlags) send(ctx context.Context, s *cli.OpenedStore, o events.OperatorWakeUp) error {
	u, err := url.Parse(f.QueueURL)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return fmt.Errorf("--queue-url %q is not a queue URL like https://sqs.us-east-1.amazonaws.com/111122223333/patch-agent", f.QueueURL)
	}
	region := ""
	if m := queueRegion.FindStringSubmatch(u.Host); m != nil {
		region = m[1]
	}
	if s.AWS != nil && region == "" {
		region = s.AWS.Region
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id) // crypto/rand.Read never fails (Go 1.24+)
	body, err := events.NewOperatorWakeUp(o, hex.EncodeToString(id), region, providers.AccountFromQueueURL(f.QueueURL), time.Now())
	if err != nil {
		return err
	}
	client, err := NewQueueSender(ctx, s.AWS, region)
	if err != nil {
		return err
	}
	if _, err := client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(f.QueueURL), MessageBody: aws.String(string(body))}); err != nil {
		return fmt.Errorf("sending the wake-up to %s: %w", f.QueueURL, err)
	}
	return nil
}
