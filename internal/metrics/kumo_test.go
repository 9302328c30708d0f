package metrics_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/events"
	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
	"github.com/patch-agent/patch-agent/internal/testenv"
)

// kumoCloudWatch returns a CloudWatch client on kumo: kumo cannot read gzip-compressed PutMetricData bodies.
func kumoCloudWatch(t *testing.T) *cloudwatch.Client {
	return cloudwatch.NewFromConfig(testenv.AWSConfig(testenv.Kumo(t)), func(o *cloudwatch.Options) { o.DisableRequestCompression = true })
}

func TestKumoPublishedMetricsReadBackFromCloudWatch(t *testing.T) {
	ctx := testenv.Context(t)
	cw := kumoCloudWatch(t)
	ns := testenv.UniqueName(t, "ns") // isolates this test's metrics on the shared kumo

	reg := metrics.NewRegistry(nil)
	view := model.GroupView{Instances: []model.InstanceView{
		{ID: "i-1", ImageID: "ami-new", LifecycleState: "InService"},
		{ID: "i-2", ImageID: "ami-old", LifecycleState: "InService"},
		{ID: "i-3", ImageID: "ami-old", LifecycleState: "InService"},
	}}
	ro := state.Rollout{Group: group, Platform: platform, Phase: state.PhaseReplacing, TargetImageID: "ami-new"}
	reg.TargetObserved(model.Target{Group: group, Platform: platform}, view, ro, nil)
	retire(reg, 0)
	var st events.Stats
	st.Processed.Store(5)
	reg.Consumer = func() *events.Stats { return &st }
	pub := &metrics.Publisher{API: cw, Registry: reg, Namespace: ns}
	require.NoError(t, pub.Publish(ctx))

	list, err := cw.ListMetrics(ctx, &cloudwatch.ListMetricsInput{Namespace: aws.String(ns)})
	require.NoError(t, err)
	var names []string
	for _, m := range list.Metrics {
		names = append(names, aws.ToString(m.MetricName))
	}
	for _, s := range reg.Collect() {
		require.Contains(t, names, s.Name)
	}

	dims := []cwtypes.Dimension{{Name: aws.String("Group"), Value: aws.String(group)}, {Name: aws.String("Platform"), Value: aws.String(platform)}}
	query := func(id, name string, dims []cwtypes.Dimension) cwtypes.MetricDataQuery {
		return cwtypes.MetricDataQuery{Id: aws.String(id), MetricStat: &cwtypes.MetricStat{Period: aws.Int32(60), Stat: aws.String("Maximum"),
			Metric: &cwtypes.Metric{Namespace: aws.String(ns), MetricName: aws.String(name), Dimensions: dims}}}
	}
	now := time.Now()
	out, err := cw.GetMetricData(ctx, &cloudwatch.GetMetricDataInput{StartTime: aws.Time(now.Add(-5 * time.Minute)), EndTime: aws.Time(now.Add(5 * time.Minute)),
		MetricDataQueries: []cwtypes.MetricDataQuery{
			query("outdated", metrics.InstancesOutdated, dims),
			query("ontarget", metrics.InstancesOnTargetAMI, dims),
			query("replaced", metrics.ReplacementsSucceeded, dims),
			query("processed", metrics.MessagesProcessed, nil),
		}})
	require.NoError(t, err)
	got := map[string][]float64{}
	for _, r := range out.MetricDataResults {
		got[aws.ToString(r.Id)] = r.Values
	}
	require.Equal(t, map[string][]float64{"outdated": {2}, "ontarget": {1}, "replaced": {1}, "processed": {5}}, got)

	stats, err := cw.GetMetricStatistics(ctx, &cloudwatch.GetMetricStatisticsInput{Namespace: aws.String(ns),
		MetricName: aws.String(metrics.AgentHeartbeat), StartTime: aws.Time(now.Add(-5 * time.Minute)), EndTime: aws.Time(now.Add(5 * time.Minute)),
		Period: aws.Int32(60), Statistics: []cwtypes.Statistic{cwtypes.StatisticSum}})
	require.NoError(t, err)
	require.Len(t, stats.Datapoints, 1)
	require.Equal(t, 1.0, aws.ToFloat64(stats.Datapoints[0].Sum))
}
