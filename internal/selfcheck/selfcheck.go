// Package selfcheck verifies, before the agent acts, that it can work in the account it was pointed at: a
// region, credentials from the default chain, the queue, the state table and the read permissions of
// discovery. `patch-agent run --check` prints the result and exits; `patch-agent run` runs it first and stops
// with its one reason instead of retrying forever; the container health check (`patch-agent healthcheck`)
// asks the running agent's /readyz, which repeats the queue and table checks with the same calls.
//
// Every check uses only calls the task role already allows for the agent's own work
// (cloudformation/patch-agent.yaml): sqs:GetQueueAttributes, dynamodb:DescribeTable and
// autoscaling:DescribeAutoScalingGroups. Credentials are retrieved from the provider without an AWS call
// (AWS SDK for Go v2 Developer Guide, "Specifying Credentials": the default chain tries the environment, the
// shared files, the ECS container credentials endpoint and IMDS in that order).
package selfcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/health"
	"github.com/patch-agent/patch-agent/internal/model"
)

// Names of the checks, in the order they run.
const (
	CheckRegion      = "region"
	CheckCredentials = "credentials"
	CheckQueue       = "queue"
	// CheckWakeUpQueue runs only with Target.WakeUpQueueURL (--wake-up-queue-url), right after CheckQueue.
	CheckWakeUpQueue = "wake-up queue"
	CheckTable       = "table"
	CheckDiscovery   = "read permissions"
)

// DefaultTimeout bounds each check (credentials included: IMDS answers within a second or not at all).
const DefaultTimeout = 10 * time.Second

// GroupsAPI is the Auto Scaling call of the discovery check.
type GroupsAPI interface {
	DescribeAutoScalingGroups(ctx context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, optFns ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error)
}

var _ GroupsAPI = awsapi.AutoScaling(nil)

// Target is what the checks look at and through which clients.
type Target struct {
	Region   string
	QueueURL string
	// WakeUpQueueURL is --wake-up-queue-url; "" runs no wake-up queue check.
	WakeUpQueueURL string
	Table          string
	Credentials    aws.CredentialsProvider // nil: no credentials were configured at all
	SQS            health.QueueAttributesAPI
	DynamoDB       health.DescribeTableAPI
	AutoScaling    GroupsAPI
	// Timeout bounds each check; default DefaultTimeout.
	Timeout time.Duration
}

// Result is one check: OK with what was found, or the error; Skipped when an earlier check failed.
type Result struct {
	Name    string
	OK      bool
	Skipped bool
	Found   string // what the check saw, e.g. "queue arn:aws:sqs:eu-west-1:111122223333:patch-agent"
	Err     error
}

// Report is every check in order. Err is the first failure (nil when every check passed).
type Report struct {
	Results []Result
	Err     error
}

// Run runs the checks in order; after the first failure the rest are skipped, since they would fail for the
// same reason (no credentials fails every call). The returned Report.Err names the check and the cause, e.g.
// "credentials: no AWS credentials found: ...".
func Run(ctx context.Context, t Target) Report {
	timeout := t.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	type check struct {
		name string
		run  func(context.Context, Target) (string, error)
	}
	checks := []check{{CheckRegion, region}, {CheckCredentials, credentials}, {CheckQueue, queue}}
	if t.WakeUpQueueURL != "" {
		checks = append(checks, check{CheckWakeUpQueue, wakeUpQueue})
	}
	checks = append(checks, check{CheckTable, table}, check{CheckDiscovery, discovery})
	var rep Report
	for _, c := range checks {
		if rep.Err != nil {
			rep.Results = append(rep.Results, Result{Name: c.name, Skipped: true})
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		found, err := c.run(cctx, t)
		cancel()
		rep.Results = append(rep.Results, Result{Name: c.name, OK: err == nil, Found: found, Err: err})
		if err != nil {
			rep.Err = fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return rep
}

// Print writes one line per check ("ok", "FAILED" or "skipped") and, on failure, the reason.
func (r Report) Print(w io.Writer) {
	for _, res := range r.Results {
		switch {
		case res.Skipped:
			fmt.Fprintf(w, "  skipped  %s\n", res.Name)
		case res.OK:
			fmt.Fprintf(w, "  ok       %-17s %s\n", res.Name, res.Found)
		default:
			fmt.Fprintf(w, "  FAILED   %-17s %v\n", res.Name, res.Err)
		}
	}
}

func region(_ context.Context, t Target) (string, error) {
	if t.Region == "" {
		return "", errors.New("no region: set --region or AWS_REGION")
	}
	return t.Region, nil
}

func credentials(ctx context.Context, t Target) (string, error) {
	if t.Credentials == nil {
		return "", errors.New("no AWS credentials configured")
	}
	c, err := t.Credentials.Retrieve(ctx)
	if err != nil {
		return "", fmt.Errorf("no AWS credentials found (environment, shared config, ECS task role, instance profile): %w", err)
	}
	if c.AccessKeyID == "" {
		return "", errors.New("the credential chain returned an empty access key id")
	}
	found := "access key " + maskKey(c.AccessKeyID)
	if c.Source != "" {
		found += " from " + c.Source
	}
	if c.CanExpire {
		found += fmt.Sprintf(", expires %s", c.Expires.UTC().Format(time.RFC3339))
	}
	return found, nil
}

// maskKey keeps the access key id's kind prefix (AKIA long-term, ASIA temporary) and its last 4 characters.
func maskKey(id string) string {
	if len(id) <= 8 {
		return strings.Repeat("*", len(id))
	}
	return id[:4] + strings.Repeat("*", len(id)-8) + id[len(id)-4:]
}

func queue(ctx context.Context, t Target) (string, error) { return queueAt(ctx, t, t.QueueURL) }

// wakeUpQueue checks the wake-up queue as queue checks the main one: readable (GetQueueAttributes) and
// with a dead-letter queue for a message the agent cannot read.
func wakeUpQueue(ctx context.Context, t Target) (string, error) {
	return queueAt(ctx, t, t.WakeUpQueueURL)
}

func queueAt(ctx context.Context, t Target, url string) (string, error) {
	out, err := t.SQS.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn, sqstypes.QueueAttributeNameRedrivePolicy}})
	if err != nil {
		return "", fmt.Errorf("GetQueueAttributes of %s: %w", url, err)
	}
	found := "queue " + out.Attributes[string(sqstypes.QueueAttributeNameQueueArn)]
	if out.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)] == "" {
		found += " (no dead-letter queue: a message the agent cannot read is received forever)"
	} else {
		found += " with a dead-letter queue"
	}
	return found, nil
}

func table(ctx context.Context, t Target) (string, error) {
	out, err := t.DynamoDB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(t.Table)})
	if err != nil {
		return "", fmt.Errorf("DescribeTable of %s: %w", t.Table, err)
	}
	if out.Table == nil {
		return "", fmt.Errorf("DescribeTable of %s returned no table", t.Table)
	}
	switch st := out.Table.TableStatus; st {
	case dbtypes.TableStatusActive, dbtypes.TableStatusUpdating, "":
	default:
		return "", fmt.Errorf("table %s is %s, not ACTIVE", t.Table, st)
	}
	keys := map[dbtypes.KeyType]string{}
	for _, k := range out.Table.KeySchema {
		keys[k.KeyType] = aws.ToString(k.AttributeName)
	}
	if keys[dbtypes.KeyTypeHash] != "pk" || keys[dbtypes.KeyTypeRange] != "sk" {
		return "", fmt.Errorf("table %s has keys %q/%q, want pk (partition) and sk (sort): docs/state.md", t.Table,
			keys[dbtypes.KeyTypeHash], keys[dbtypes.KeyTypeRange])
	}
	return fmt.Sprintf("table %s %s, keys pk/sk", aws.ToString(out.Table.TableArn), out.Table.TableStatus), nil
}

// discovery makes the first call of every reconcile tick, one page of one group: the opted-in groups.
func discovery(ctx context.Context, t Target) (string, error) {
	out, err := t.AutoScaling.DescribeAutoScalingGroups(ctx, &autoscaling.DescribeAutoScalingGroupsInput{
		Filters:    []astypes.Filter{{Name: aws.String("tag-key"), Values: []string{model.TagEnabled}}},
		MaxRecords: aws.Int32(1)})
	if err != nil {
		return "", fmt.Errorf("DescribeAutoScalingGroups: %w", err)
	}
	if len(out.AutoScalingGroups) == 0 {
		return "DescribeAutoScalingGroups allowed; no group tagged " + model.TagEnabled + " yet", nil
	}
	more := ""
	if out.NextToken != nil {
		more = " and more"
	}
	return fmt.Sprintf("DescribeAutoScalingGroups allowed; groups tagged %s: %s%s", model.TagEnabled,
		aws.ToString(out.AutoScalingGroups[0].AutoScalingGroupName), more), nil
}
