package audit

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// The CloudWatch metrics of `patch-agent audit --publish-metrics`, one datum of each per group, dimension
// AutoScalingGroupName.
const (
	// MetricsNamespace is the namespace of the audit's metrics.
	MetricsNamespace = "PatchAgent/Audit"
	// MetricOutdatedInstances is Group.OutdatedInstances (unit Count).
	MetricOutdatedInstances = "OutdatedInstances"
	// MetricDaysBehind is Group.DaysBehind in days (unit None: CloudWatch has no day unit); not sent when
	// unknown.
	MetricDaysBehind = "DaysBehind"
	// DimensionGroup names the group of a datum.
	DimensionGroup = "AutoScalingGroupName"
)

// maxDatumsPerCall: PutMetricData takes at most 1000 datums (Amazon CloudWatch API Reference, "PutMetricData").
const maxDatumsPerCall = 1000

// PublishMetrics sends the report's metrics to CloudWatch, timestamped at r.GeneratedAt, 1000 datums per call,
// and returns how many it sent. Groups of status unknown send nothing. It stops at the first failed call.
func PublishMetrics(ctx context.Context, api awsapi.MetricData, r *Report) (int, error) {
	var datums []cwtypes.MetricDatum
	at := aws.Time(r.GeneratedAt)
	for _, g := range r.Groups {
		if g.Status == StatusUnknown {
			continue
		}
		dims := []cwtypes.Dimension{{Name: aws.String(DimensionGroup), Value: aws.String(g.Name)}}
		datums = append(datums, cwtypes.MetricDatum{MetricName: aws.String(MetricOutdatedInstances), Dimensions: dims,
			Value: aws.Float64(float64(g.OutdatedInstances)), Unit: cwtypes.StandardUnitCount, Timestamp: at})
		if g.DaysBehind != Unknown {
			datums = append(datums, cwtypes.MetricDatum{MetricName: aws.String(MetricDaysBehind), Dimensions: dims,
				Value: aws.Float64(float64(g.DaysBehind)), Unit: cwtypes.StandardUnitNone, Timestamp: at})
		}
	}
	sent := 0
	for start := 0; start < len(datums); start += maxDatumsPerCall {
		batch := datums[start:min(start+maxDatumsPerCall, len(datums))]
		if _, err := api.PutMetricData(ctx, &cloudwatch.PutMetricDataInput{Namespace: aws.String(MetricsNamespace), MetricData: batch}); err != nil {
			return sent, fmt.Errorf("publishing %d audit metrics to CloudWatch namespace %s: %w", len(batch), MetricsNamespace, err)
		}
		sent += len(batch)
	}
	return sent, nil
}
