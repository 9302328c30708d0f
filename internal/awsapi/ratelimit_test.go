package awsapi_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/sim"
)

// TestDefaultRateLimitsStayBelowTheAccountLimitsAWSDocuments: every client-side class refills slower and
// bursts no more than the account bucket it draws on (sim.AWSAccountLimits, the documented figures).
func TestDefaultRateLimitsStayBelowTheAccountLimitsAWSDocuments(t *testing.T) {
	account := sim.AWSAccountLimits()
	for class, l := range awsapi.DefaultRateLimits() {
		a, ok := account[class]
		require.True(t, ok, "class %s has an account bucket", class)
		require.Less(t, l.Rate, a.Rate, "class %s refills below the account", class)
		require.LessOrEqual(t, l.Burst, a.Burst, "class %s bursts within the account", class)
	}
}

func TestParseRateLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs []string
		class string
		want  awsapi.RateLimit
		err   string
	}{
		{"no spec keeps the defaults", nil, awsapi.RateEC2Mutating, awsapi.RateLimit{Rate: 2.5, Burst: 100}, ""},
		{"rate and burst", []string{"ec2=8/40"}, awsapi.RateEC2, awsapi.RateLimit{Rate: 8, Burst: 40}, ""},
		{"burst defaults to the rate rounded up", []string{"ssm=2.5"}, awsapi.RateSSM, awsapi.RateLimit{Rate: 2.5, Burst: 3}, ""},
		{"0 lifts the limit", []string{"ecs=0"}, awsapi.RateECS, awsapi.RateLimit{Rate: 0, Burst: 1}, ""},
		{"unknown class", []string{"sqs=5"}, "", awsapi.RateLimit{}, `--rate-limit "sqs=5": want CLASS=RATE[/BURST] with CLASS one of autoscaling, cloudwatch, ec2, ec2-mutating, ecs, eks, ssm`},
		{"no equals sign", []string{"ec2"}, "", awsapi.RateLimit{}, "want CLASS=RATE[/BURST]"},
		{"negative rate", []string{"ec2=-1"}, "", awsapi.RateLimit{}, "RATE must be a number of requests per second"},
		{"zero burst", []string{"ec2=5/0"}, "", awsapi.RateLimit{}, "BURST must be a whole number"},
		// NaN and Inf would lift the limit silently, and a tiny rate would stop the agent: all are refused.
		{"NaN rate", []string{"ec2=NaN"}, "", awsapi.RateLimit{}, "RATE must be a number of requests per second"},
		{"infinite rate", []string{"ec2=Inf"}, "", awsapi.RateLimit{}, "RATE must be a number of requests per second"},
		{"rate too small to be a limit", []string{"autoscaling=1e-300"}, "", awsapi.RateLimit{}, "at least 0.01"},
		{"the smallest rate", []string{"autoscaling=0.01"}, awsapi.RateAutoScaling, awsapi.RateLimit{Rate: 0.01, Burst: 1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := awsapi.ParseRateLimits(tc.specs)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got[tc.class])
		})
	}
}

func TestRateClassSplitsEC2ByMutatingAndNamesTheSDKServiceIDs(t *testing.T) {
	for _, tc := range []struct {
		service, op string
		want        string
	}{
		{"EC2", "CreateLaunchTemplateVersion", awsapi.RateEC2Mutating},
		{"ec2", "DescribeInstances", awsapi.RateEC2},
		{"Auto Scaling", "DescribeLifecycleHooks", awsapi.RateAutoScaling},
		{"autoscaling", "CompleteLifecycleAction", awsapi.RateAutoScaling},
		{"ECS", "ListContainerInstances", awsapi.RateECS},
		{"SSM", "GetParameters", awsapi.RateSSM},
		{"SQS", "ReceiveMessage", ""},
		{"DynamoDB", "Query", ""},
	} {
		require.Equal(t, tc.want, awsapi.RateClass(tc.service, awsapi.IsMutating(tc.op)), "%s %s", tc.service, tc.op)
	}
}

// TestLimiterWaitGivesUpWithTheContext: a request waiting for its token returns the context's error instead
// of waiting on; unlimited services never wait.
func TestLimiterWaitGivesUpWithTheContext(t *testing.T) {
	l := awsapi.NewLimiter(awsapi.RateLimits{awsapi.RateEC2: {Rate: 0.001, Burst: 1}})
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, l.Wait(ctx, "ec2", false), "the burst lets the first request through")
	cancel()
	require.ErrorIs(t, l.Wait(ctx, "ec2", false), context.Canceled)
	require.NoError(t, l.Wait(ctx, "sqs", false), "SQS is not limited")
	var none *awsapi.Limiter
	require.NoError(t, none.Wait(ctx, "ec2", false), "a nil limiter limits nothing")
}
