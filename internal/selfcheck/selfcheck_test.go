package selfcheck

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/health"
)

const (
	queueURL = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent"
	queueArn = "arn:aws:sqs:eu-west-1:111122223333:patch-agent"
	tableArn = "arn:aws:dynamodb:eu-west-1:111122223333:table/patch-agent"
)

// fakeAWS answers the three calls of the checks and counts them.
type fakeAWS struct {
	queueErr, tableErr, groupsErr error
	tableStatus                   dbtypes.TableStatus
	rangeKey                      string
	groups                        []string
	calls                         []string
}

var (
	_ health.QueueAttributesAPI = (*fakeAWS)(nil)
	_ health.DescribeTableAPI   = (*fakeAWS)(nil)
	_ GroupsAPI                 = (*fakeAWS)(nil)
)

func (f *fakeAWS) GetQueueAttributes(_ context.Context, in *sqs.GetQueueAttributesInput, _ ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	f.calls = append(f.calls, "GetQueueAttributes "+aws.ToString(in.QueueUrl))
	if f.queueErr != nil {
		return nil, f.queueErr
	}
	return &sqs.GetQueueAttributesOutput{Attributes: map[string]string{"QueueArn": queueArn, "RedrivePolicy": `{"maxReceiveCount":5}`}}, nil
}

func (f *fakeAWS) DescribeTable(_ context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	f.calls = append(f.calls, "DescribeTable "+aws.ToString(in.TableName))
	if f.tableErr != nil {
		return nil, f.tableErr
	}
	status, rk := f.tableStatus, f.rangeKey
	if status == "" {
		status = dbtypes.TableStatusActive
	}
	if rk == "" {
		rk = "sk"
	}
	return &dynamodb.DescribeTableOutput{Table: &dbtypes.TableDescription{TableArn: aws.String(tableArn), TableStatus: status,
		KeySchema: []dbtypes.KeySchemaElement{{AttributeName: aws.String("pk"), KeyType: dbtypes.KeyTypeHash},
			{AttributeName: aws.String(rk), KeyType: dbtypes.KeyTypeRange}}}}, nil
}

func (f *fakeAWS) DescribeAutoScalingGroups(_ context.Context, in *autoscaling.DescribeAutoScalingGroupsInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeAutoScalingGroupsOutput, error) {
	f.calls = append(f.calls, "DescribeAutoScalingGroups")
	if f.groupsErr != nil {
		return nil, f.groupsErr
	}
	out := &autoscaling.DescribeAutoScalingGroupsOutput{}
	for _, g := range f.groups {
		out.AutoScalingGroups = append(out.AutoScalingGroups, astypes.AutoScalingGroup{AutoScalingGroupName: aws.String(g)})
	}
	return out, nil
}

var staticCreds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{AccessKeyID: "ASIAEXAMPLEKEY123456", SecretAccessKey: "s", Source: "EnvConfigCredentials"}, nil
})

var noCreds = aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
	return aws.Credentials{}, errors.New("failed to refresh cached credentials, no EC2 IMDS role found")
})

func TestSelfCheckStopsAtTheFirstMissingPieceWithOneReason(t *testing.T) {
	denied := errors.New("api error AccessDeniedException: not authorized to perform: dynamodb:DescribeTable")
	cases := []struct {
		name      string
		region    string
		creds     aws.CredentialsProvider
		aws       fakeAWS
		wantErr   string // "" passes
		wantCalls []string
		wantFound map[string]string
	}{
		{name: "everything there", region: "eu-west-1", creds: staticCreds, aws: fakeAWS{groups: []string{"ecs-prod"}},
			wantCalls: []string{"GetQueueAttributes " + queueURL, "DescribeTable patch-agent", "DescribeAutoScalingGroups"},
			wantFound: map[string]string{
				CheckRegion:      "eu-west-1",
				CheckCredentials: "access key ASIA************3456 from EnvConfigCredentials",
				CheckQueue:       "queue " + queueArn + " with a dead-letter queue",
				CheckTable:       "table " + tableArn + " ACTIVE, keys pk/sk",
				CheckDiscovery:   "DescribeAutoScalingGroups allowed; groups tagged patch-agent/enabled: ecs-prod",
			}},
		{name: "no region makes no call", region: "", creds: staticCreds, wantErr: "region: no region: set --region or AWS_REGION"},
		{name: "no credentials fails first and clearly, no AWS call made", region: "eu-west-1", creds: noCreds,
			wantErr: "credentials: no AWS credentials found (environment, shared config, ECS task role, instance profile): failed to refresh cached credentials, no EC2 IMDS role found"},
		{name: "no credential provider at all", region: "eu-west-1", creds: nil, wantErr: "credentials: no AWS credentials configured"},
		{name: "a queue that cannot be read", region: "eu-west-1", creds: staticCreds, aws: fakeAWS{queueErr: errors.New("AWS.SimpleQueueService.NonExistentQueue")},
			wantErr: "queue: GetQueueAttributes of " + queueURL + ": AWS.SimpleQueueService.NonExistentQueue", wantCalls: []string{"GetQueueAttributes " + queueURL}},
		{name: "the table is denied", region: "eu-west-1", creds: staticCreds, aws: fakeAWS{tableErr: denied},
			wantErr:   "table: DescribeTable of patch-agent: " + denied.Error(),
			wantCalls: []string{"GetQueueAttributes " + queueURL, "DescribeTable patch-agent"}},
		{name: "a table with other keys is not the state table", region: "eu-west-1", creds: staticCreds, aws: fakeAWS{rangeKey: "id"},
			wantErr:   `table: table patch-agent has keys "pk"/"id", want pk (partition) and sk (sort): docs/state.md`,
			wantCalls: []string{"GetQueueAttributes " + queueURL, "DescribeTable patch-agent"}},
		{name: "a table being deleted", region: "eu-west-1", creds: staticCreds, aws: fakeAWS{tableStatus: dbtypes.TableStatusDeleting},
			wantErr:   "table: table patch-agent is DELETING, not ACTIVE",
			wantCalls: []string{"GetQueueAttributes " + queueURL, "DescribeTable patch-agent"}},
		{name: "discovery denied", region: "eu-west-1", creds: staticCreds, aws: fakeAWS{groupsErr: errors.New("AccessDenied")},
			wantErr:   "read permissions: DescribeAutoScalingGroups: AccessDenied",
			wantCalls: []string{"GetQueueAttributes " + queueURL, "DescribeTable patch-agent", "DescribeAutoScalingGroups"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := c.aws
			rep := Run(context.Background(), Target{Region: c.region, QueueURL: queueURL, Table: "patch-agent", Credentials: c.creds,
				SQS: &f, DynamoDB: &f, AutoScaling: &f, Timeout: time.Second})
			require.Equal(t, c.wantCalls, f.calls, "checks after a failure make no call")
			require.Len(t, rep.Results, 5, "every check is reported, run or skipped")
			if c.wantErr == "" {
				require.NoError(t, rep.Err)
				for _, r := range rep.Results {
					require.True(t, r.OK, r.Name)
					require.Equal(t, c.wantFound[r.Name], r.Found, r.Name)
				}
				return
			}
			require.EqualError(t, rep.Err, c.wantErr)
			failed := 0
			after := false
			for _, r := range rep.Results {
				if after {
					require.True(t, r.Skipped, "%s after the failure is skipped", r.Name)
				}
				if !r.OK && !r.Skipped {
					failed++
					after = true
				}
			}
			require.Equal(t, 1, failed, "one reason")
			var out bytes.Buffer
			rep.Print(&out)
			require.Contains(t, out.String(), "FAILED")
		})
	}
}

// TestWakeUpQueueIsCheckedOnlyWhenConfigured: with --wake-up-queue-url the check reads
// the wake-up queue too (GetQueueAttributes), right after the main queue, and a wake-up queue that cannot be
// read stops the start with that reason; without the flag no such check runs (older stacks).
func TestWakeUpQueueIsCheckedOnlyWhenConfigured(t *testing.T) {
	const wakeURL = "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent-wake-up"
	for _, c := range []struct {
		name      string
		wakeURL   string
		failWake  bool
		wantNames []string
		wantErr   string
	}{
		{name: "without the flag", wantNames: []string{CheckRegion, CheckCredentials, CheckQueue, CheckTable, CheckDiscovery}},
		{name: "with the flag", wakeURL: wakeURL, wantNames: []string{CheckRegion, CheckCredentials, CheckQueue, CheckWakeUpQueue, CheckTable, CheckDiscovery}},
		{name: "an unreadable wake-up queue", wakeURL: wakeURL, failWake: true,
			wantNames: []string{CheckRegion, CheckCredentials, CheckQueue, CheckWakeUpQueue, CheckTable, CheckDiscovery},
			wantErr:   "wake-up queue: GetQueueAttributes of " + wakeURL + ": AWS.SimpleQueueService.NonExistentQueue"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &fakeAWS{groups: []string{"ecs-prod"}}
			api := &failQueue{fakeAWS: f}
			if c.failWake {
				api.url, api.err = wakeURL, errors.New("AWS.SimpleQueueService.NonExistentQueue")
			}
			rep := Run(context.Background(), Target{Region: "eu-west-1", QueueURL: queueURL, WakeUpQueueURL: c.wakeURL, Table: "patch-agent",
				Credentials: staticCreds, SQS: api, DynamoDB: f, AutoScaling: f, Timeout: time.Second})
			var names []string
			for _, r := range rep.Results {
				names = append(names, r.Name)
			}
			require.Equal(t, c.wantNames, names)
			if c.wantErr != "" {
				require.EqualError(t, rep.Err, c.wantErr)
				return
			}
			require.NoError(t, rep.Err)
			if c.wakeURL != "" {
				require.Contains(t, f.calls, "GetQueueAttributes "+wakeURL)
				require.Equal(t, "queue "+queueArn+" with a dead-letter queue", rep.Results[3].Found)
			}
		})
	}
}

// failQueue fails GetQueueAttributes of one queue URL.
type failQueue struct {
	*fakeAWS
	url string
	err error
}

func (q *failQueue) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, o ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if q.err != nil && aws.ToString(in.QueueUrl) == q.url {
		return nil, q.err
	}
	return q.fakeAWS.GetQueueAttributes(ctx, in, o...)
}
