package wire

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/aws-sdk-go-v2/service/ecs"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/aws-sdk-go-v2/service/ssm"
	"github.com/aws/smithy-go"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/sim"
	"github.com/patch-agent/patch-agent/internal/testenv"
	"github.com/patch-agent/patch-agent/internal/testworld"
)

// world is the demo's ECS world served on localhost, with SDK clients pointed at it.
func world(t *testing.T) (*testworld.World, *Server, aws.Config) {
	t.Helper()
	s := testworld.DemoSpec()
	s.Groups = s.Groups[:1]
	w, err := testworld.Build(s)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	srv, err := Start(ctx, w.Account)
	require.NoError(t, err)
	w.Account.Advance(3 * time.Minute) // instances InService, container instances ACTIVE, tasks RUNNING
	return w, srv, testenv.AWSConfig(srv.URL)
}

// Every read the agent makes comes back over the wire as the simulated account answers it in process.
func TestServedAnswersEqualTheInProcessAnswers(t *testing.T) {
	w, srv, cfg := world(t)
	ctx := context.Background()
	as, ec, ecsc := autoscaling.NewFromConfig(cfg), ec2.NewFromConfig(cfg), ecs.NewFromConfig(cfg)

	groupsIn := &autoscaling.DescribeAutoScalingGroupsInput{AutoScalingGroupNames: []string{testworld.GroupName}}
	wire, err := as.DescribeAutoScalingGroups(ctx, groupsIn)
	require.NoError(t, err)
	local, err := w.Account.AutoScaling().DescribeAutoScalingGroups(ctx, groupsIn)
	require.NoError(t, err)
	require.Len(t, wire.AutoScalingGroups, 1)
	require.Equal(t, local.AutoScalingGroups, wire.AutoScalingGroups)
	require.Len(t, wire.AutoScalingGroups[0].Instances, 3)
	require.NotEmpty(t, wire.AutoScalingGroups[0].Tags)

	ids := []string{aws.ToString(wire.AutoScalingGroups[0].Instances[0].InstanceId)}
	instIn := &ec2.DescribeInstancesInput{InstanceIds: ids}
	wi, err := ec.DescribeInstances(ctx, instIn)
	require.NoError(t, err)
	li, err := w.Account.EC2().DescribeInstances(ctx, instIn)
	require.NoError(t, err)
	require.Equal(t, li.Reservations, wi.Reservations)
	require.Equal(t, testworld.ImageA, aws.ToString(wi.Reservations[0].Instances[0].ImageId))

	ltIn := &ec2.DescribeLaunchTemplateVersionsInput{LaunchTemplateId: wire.AutoScalingGroups[0].LaunchTemplate.LaunchTemplateId,
		Versions: []string{"$Default"}}
	wl, err := ec.DescribeLaunchTemplateVersions(ctx, ltIn)
	require.NoError(t, err)
	ll, err := w.Account.EC2().DescribeLaunchTemplateVersions(ctx, ltIn)
	require.NoError(t, err)
	require.Equal(t, ll.LaunchTemplateVersions, wl.LaunchTemplateVersions)

	imgIn := &ec2.DescribeImagesInput{ImageIds: []string{testworld.ImageA}}
	wim, err := ec.DescribeImages(ctx, imgIn)
	require.NoError(t, err)
	lim, err := w.Account.EC2().DescribeImages(ctx, imgIn)
	require.NoError(t, err)
	require.Equal(t, lim.Images, wim.Images)
	require.Len(t, wim.Images, 1)
	require.Equal(t, ec2types.ImageStateAvailable, wim.Images[0].State)

	listIn := &ecs.ListContainerInstancesInput{Cluster: aws.String(testworld.Cluster)}
	wc, err := ecsc.ListContainerInstances(ctx, listIn)
	require.NoError(t, err)
	require.Len(t, wc.ContainerInstanceArns, 3)
	descIn := &ecs.DescribeContainerInstancesInput{Cluster: aws.String(testworld.Cluster), ContainerInstances: wc.ContainerInstanceArns}
	wd, err := ecsc.DescribeContainerInstances(ctx, descIn)
	require.NoError(t, err)
	ld, err := w.Account.ECS().DescribeContainerInstances(ctx, descIn)
	require.NoError(t, err)
	require.Equal(t, ld.ContainerInstances, wd.ContainerInstances)

	tasksIn := &ecs.ListTasksInput{Cluster: aws.String(testworld.Cluster), ContainerInstance: aws.String(wc.ContainerInstanceArns[0])}
	wt, err := ecsc.ListTasks(ctx, tasksIn)
	require.NoError(t, err)
	require.NotEmpty(t, wt.TaskArns)
	dtIn := &ecs.DescribeTasksInput{Cluster: aws.String(testworld.Cluster), Tasks: wt.TaskArns}
	wdt, err := ecsc.DescribeTasks(ctx, dtIn)
	require.NoError(t, err)
	ldt, err := w.Account.ECS().DescribeTasks(ctx, dtIn)
	require.NoError(t, err)
	require.Equal(t, ldt.Tasks, wdt.Tasks)

	pin := &ssm.GetParametersInput{Names: []string{testworld.Parameter}}
	wp, err := ssm.NewFromConfig(cfg).GetParameters(ctx, pin)
	require.NoError(t, err)
	require.Equal(t, testworld.ImageA, aws.ToString(wp.Parameters[0].Value))

	q := sqs.NewFromConfig(cfg)
	attrs, err := q.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(w.QueueURL),
		AttributeNames: []sqstypes.QueueAttributeName{sqstypes.QueueAttributeNameQueueArn, sqstypes.QueueAttributeNameRedrivePolicy}})
	require.NoError(t, err)
	require.Contains(t, attrs.Attributes[string(sqstypes.QueueAttributeNameQueueArn)], ":patch-agent")
	require.NotEmpty(t, attrs.Attributes[string(sqstypes.QueueAttributeNameRedrivePolicy)])
	msgs, err := q.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(w.QueueURL), MaxNumberOfMessages: 10})
	require.NoError(t, err)
	require.NotEmpty(t, msgs.Messages, "the hook's test notification")
	_, err = q.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.QueueURL), ReceiptHandle: msgs.Messages[0].ReceiptHandle})
	require.NoError(t, err)

	clusters, err := awseks.NewFromConfig(cfg).ListClusters(ctx, &awseks.ListClustersInput{})
	require.NoError(t, err)
	require.Empty(t, clusters.Clusters)
	require.Empty(t, srv.Unknown())
}

// Errors reach the SDK with the code the simulated account gives them, so internal/awsapi classifies them as
// it classifies AWS's.
func TestServedErrorsKeepTheirCodes(t *testing.T) {
	_, srv, cfg := world(t)
	ctx := context.Background()
	as := autoscaling.NewFromConfig(cfg)
	_, err := as.CancelInstanceRefresh(ctx, &autoscaling.CancelInstanceRefreshInput{AutoScalingGroupName: aws.String(testworld.GroupName)})
	var notFound *astypes.ActiveInstanceRefreshNotFoundFault
	require.True(t, errors.As(err, &notFound), "%v", err)

	_, err = as.StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String(testworld.GroupName)})
	require.NoError(t, err)
	_, err = as.StartInstanceRefresh(ctx, &autoscaling.StartInstanceRefreshInput{AutoScalingGroupName: aws.String(testworld.GroupName)})
	var inProgress *astypes.InstanceRefreshInProgressFault
	require.True(t, errors.As(err, &inProgress), "%v", err)
	refreshes, err := as.DescribeInstanceRefreshes(ctx, &autoscaling.DescribeInstanceRefreshesInput{AutoScalingGroupName: aws.String(testworld.GroupName)})
	require.NoError(t, err)
	require.Len(t, refreshes.InstanceRefreshes, 1)
	require.Equal(t, astypes.InstanceRefreshStatusPending, refreshes.InstanceRefreshes[0].Status)

	_, err = as.SetDesiredCapacity(ctx, &autoscaling.SetDesiredCapacityInput{AutoScalingGroupName: aws.String(testworld.GroupName), DesiredCapacity: aws.Int32(100)})
	var apiErr smithy.APIError
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, "ValidationError", apiErr.ErrorCode())

	_, err = ec2.NewFromConfig(cfg).DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0123456789abcdef0"}})
	require.True(t, awsapi.IsInstanceNotFound(err), "%v", err)

	_, err = ecs.NewFromConfig(cfg).ListContainerInstances(ctx, &ecs.ListContainerInstancesInput{Cluster: aws.String("nope")})
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, "ClusterNotFoundException", apiErr.ErrorCode())

	// An operation the simulation does not model is a clear error, and recorded.
	_, err = as.DescribeTags(ctx, &autoscaling.DescribeTagsInput{})
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, codeUnknownOperation, apiErr.ErrorCode())
	require.Len(t, srv.Unknown(), 1)
	require.Equal(t, "DescribeTags", srv.Unknown()[0].Operation)
}

// A throttled call reaches the SDK with the service's throttling code: the SDK's retryer retries it, and the
// agent's classification (awsapi.IsThrottled) sees it once the retries are spent.
func TestServedThrottlingIsRetriedAndClassified(t *testing.T) {
	w, srv, cfg := world(t)
	faults := sim.NewFaults(1, nil, sim.FaultRule{Op: "autoscaling:DescribeAutoScalingGroups", Every: 1, Codes: []string{sim.FaultThrottling}, Max: 2})
	srv.Serve("autoscaling", faults.AutoScaling(w.Account.AutoScaling()))
	cfg.Retryer = func() aws.Retryer {
		return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxBackoff = time.Millisecond })
	}
	out, err := autoscaling.NewFromConfig(cfg).DescribeAutoScalingGroups(context.Background(), &autoscaling.DescribeAutoScalingGroupsInput{})
	require.NoError(t, err, "two throttled attempts, the third answered")
	require.Len(t, out.AutoScalingGroups, 1)
	require.Equal(t, 2, faults.Stats().Injected["autoscaling:DescribeAutoScalingGroups"])

	faults.SetRules(sim.FaultRule{Op: "ec2:*", Every: 1, Codes: []string{sim.FaultRequestLimit}})
	srv.Serve("ec2", faults.EC2(w.Account.EC2()))
	_, err = ec2.NewFromConfig(cfg).DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{})
	require.True(t, awsapi.IsThrottled(err), "%v", err)
	var apiErr smithy.APIError
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, sim.FaultRequestLimit, apiErr.ErrorCode())
}

// A parameter no field of the operation's input takes is refused with a clear error, never ignored.
func TestServedRequestWithAnUnknownParameterIsRefused(t *testing.T) {
	_, srv, _ := world(t)
	form := url.Values{"Action": {"DescribeAutoScalingGroups"}, "Version": {"2011-01-01"},
		"AutoScalingGroupNames.member.1": {testworld.GroupName}, "Bogus": {"1"}}
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=test/20261206/us-east-1/autoscaling/aws4_request, SignedHeaders=host, Signature=0")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, string(body), "unknown parameter &#34;Bogus&#34;")
	require.Len(t, srv.Unknown(), 1)
	require.Equal(t, "DescribeAutoScalingGroups", srv.Unknown()[0].Operation)
}
