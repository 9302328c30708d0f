package sim

import (
	"context"
	"math"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"
	ebtypes "github.com/aws/aws-sdk-go-v2/service/eventbridge/types"
	"github.com/stretchr/testify/require"
)

func TestPutMetricDataRecordsValidDatumsAndRejectsInvalidCalls(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	cw := a.CloudWatch()
	_, err := cw.PutMetricData(ctx, &cloudwatch.PutMetricDataInput{Namespace: aws.String("PatchAgent"), MetricData: []cwtypes.MetricDatum{
		{MetricName: aws.String("InstancesOutdated"), Value: aws.Float64(2), Unit: cwtypes.StandardUnitCount,
			Dimensions: []cwtypes.Dimension{{Name: aws.String("Group"), Value: aws.String("g")}}},
	}})
	require.NoError(t, err)
	require.Equal(t, []PublishedMetric{{Namespace: "PatchAgent", Name: "InstancesOutdated", Dimensions: map[string]string{"Group": "g"},
		Value: 2, Unit: cwtypes.StandardUnitCount, At: start}}, a.PublishedMetrics())
	require.Equal(t, 1, a.Calls()["cloudwatch:PutMetricData"])

	for name, in := range map[string]*cloudwatch.PutMetricDataInput{
		"no namespace": {MetricData: []cwtypes.MetricDatum{{MetricName: aws.String("x"), Value: aws.Float64(1)}}},
		"no datum":     {Namespace: aws.String("n")},
		"1001 datums":  {Namespace: aws.String("n"), MetricData: make([]cwtypes.MetricDatum, 1001)},
		"not a number": {Namespace: aws.String("n"), MetricData: []cwtypes.MetricDatum{{MetricName: aws.String("x"), Value: aws.Float64(math.NaN())}}},
		"empty dimension": {Namespace: aws.String("n"), MetricData: []cwtypes.MetricDatum{{MetricName: aws.String("x"), Value: aws.Float64(1),
			Dimensions: []cwtypes.Dimension{{Name: aws.String("Platform"), Value: aws.String("")}}}}},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := cw.PutMetricData(ctx, in)
			require.Error(t, err)
		})
	}
	require.Len(t, a.PublishedMetrics(), 1, "a rejected call records nothing")
}

func TestPutEventsRecordsEntriesAndFailsBadOnesAlone(t *testing.T) {
	ctx := context.Background()
	a := newAccount(t)
	eb := a.EventBridge()
	out, err := eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: []ebtypes.PutEventsRequestEntry{
		{Source: aws.String("patch-agent"), DetailType: aws.String("Rollout State Change"), Detail: aws.String(`{"group":"g"}`)},
		{Source: aws.String("patch-agent"), DetailType: aws.String("Rollout State Change"), Detail: aws.String(`not json`)},
		{Source: aws.String("patch-agent"), DetailType: aws.String("Lifecycle Action Completed"), Detail: aws.String(`{}`), EventBusName: aws.String("ops")},
	}})
	require.NoError(t, err)
	require.Equal(t, int32(1), out.FailedEntryCount)
	require.Equal(t, "MalformedDetail", aws.ToString(out.Entries[1].ErrorCode))
	require.Equal(t, []PublishedEvent{
		{Bus: "default", Source: "patch-agent", DetailType: "Rollout State Change", Detail: `{"group":"g"}`, At: start},
		{Bus: "ops", Source: "patch-agent", DetailType: "Lifecycle Action Completed", Detail: `{}`, At: start},
	}, a.PublishedEvents())

	_, err = eb.PutEvents(ctx, &eventbridge.PutEventsInput{Entries: make([]ebtypes.PutEventsRequestEntry, 11)})
	require.ErrorContains(t, err, "ValidationException")
}
