package metrics_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/stretchr/testify/require"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/patch-agent/patch-agent/internal/metrics"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// fakeCloudWatch records PutMetricData calls and fails them with errs, in order, while any are left.
type fakeCloudWatch struct {
	mu    sync.Mutex
	calls []*cloudwatch.PutMetricDataInput
	errs  []error
}

var _ metrics.PutMetricDataAPI = (*fakeCloudWatch)(nil)

func (f *fakeCloudWatch) PutMetricData(_ context.Context, in *cloudwatch.PutMetricDataInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.PutMetricDataOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, in)
	if len(f.errs) > 0 {
		err := f.errs[0]
		f.errs = f.errs[1:]
		if err != nil {
			return nil, err
		}
	}
	return &cloudwatch.PutMetricDataOutput{}, nil
}

func (f *fakeCloudWatch) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// sent returns the value of the named datum of group in call i ("" group: agent-wide).
func (f *fakeCloudWatch) sent(t *testing.T, i int, name, group string) float64 {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, d := range f.calls[i].MetricData {
		g := ""
		for _, dim := range d.Dimensions {
			if aws.ToString(dim.Name) == metrics.DimensionGroup {
				g = aws.ToString(dim.Value)
			}
		}
		if aws.ToString(d.MetricName) == name && g == group {
			return aws.ToFloat64(d.Value)
		}
	}
	t.Fatalf("call %d has no %s for %q", i, name, group)
	return math.NaN()
}

// retire records one more replaced instance of group.
func retire(r *metrics.Registry, n int) {
	prev := rec(state.PhaseReplacing, "")
	for i := range n {
		prev.Replaced = append(prev.Replaced, fmt.Sprintf("i-%d", i))
	}
	next := prev
	next.Replaced = append(append([]string(nil), prev.Replaced...), "i-new")
	r.RolloutTransition(prev, next, "old instance terminated")
}

func TestCountersArePublishedAsIncreasesSinceTheLastSuccessfulPublish(t *testing.T) {
	ctx := context.Background()
	reg := metrics.NewRegistry(nil)
	cw := &fakeCloudWatch{errs: []error{nil, errors.New("throttled"), nil, nil}}
	pub := &metrics.Publisher{API: cw, Registry: reg}
	retire(reg, 0)
	retire(reg, 1)
	require.NoError(t, pub.Publish(ctx))
	require.Equal(t, 2.0, cw.sent(t, 0, metrics.ReplacementsSucceeded, group))
	require.Equal(t, 2.0, pub.Snapshot()[key(metrics.ReplacementsSucceeded)])

	retire(reg, 2)
	require.Error(t, pub.Publish(ctx), "a failed call is returned")
	require.Equal(t, int64(1), pub.Failures())
	require.Equal(t, 2.0, pub.Snapshot()[key(metrics.ReplacementsSucceeded)], "the snapshot keeps what was published")
	require.NoError(t, pub.Publish(ctx))
	require.Equal(t, 1.0, cw.sent(t, 2, metrics.ReplacementsSucceeded, group), "the failed period's count is sent with the next call")
	require.NoError(t, pub.Publish(ctx))
	require.Equal(t, 0.0, cw.sent(t, 3, metrics.ReplacementsSucceeded, group))
	require.Equal(t, 1.0, cw.sent(t, 3, metrics.AgentHeartbeat, ""), "a heartbeat per publish")
}

func TestDatumsCarryNamespaceUnitsAndDimensionsButNoTimestamp(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	reg.TargetObserved(model.Target{Group: group, Platform: platform}, model.GroupView{}, rec(state.PhaseReplacing, ""), nil)
	cw := &fakeCloudWatch{}
	require.NoError(t, (&metrics.Publisher{API: cw, Registry: reg}).Publish(context.Background()))
	in := cw.calls[0]
	require.Equal(t, metrics.Namespace, aws.ToString(in.Namespace))
	for _, d := range in.MetricData {
		def, ok := metrics.Lookup(aws.ToString(d.MetricName))
		require.True(t, ok, aws.ToString(d.MetricName))
		require.Equal(t, def.Unit, d.Unit, def.Name)
		require.Nil(t, d.Timestamp, "CloudWatch stamps datums on receipt")
		if def.PerGroup {
			require.Equal(t, []cwtypes.Dimension{{Name: aws.String("Group"), Value: aws.String(group)},
				{Name: aws.String("Platform"), Value: aws.String(platform)}}, d.Dimensions)
		} else {
			require.Empty(t, d.Dimensions, def.Name)
		}
	}
}

func TestPublishSplitsIntoCallsOfAtMost1000Datums(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	const groups = 120
	for i := range groups {
		g := fmt.Sprintf("asg-%03d", i)
		ro := state.Rollout{Group: g, Platform: platform, Phase: state.PhaseCompleted, TargetImageID: "ami-1", SourceModified: t0}
		reg.TargetObserved(model.Target{Group: g, Platform: platform}, model.GroupView{}, ro, nil)
	}
	total := len(reg.Collect())
	require.Greater(t, total, metrics.MaxDatumsPerCall)
	cw := &fakeCloudWatch{}
	require.NoError(t, (&metrics.Publisher{API: cw, Registry: reg}).Publish(context.Background()))
	sum := 0
	for _, c := range cw.calls {
		require.LessOrEqual(t, len(c.MetricData), metrics.MaxDatumsPerCall)
		sum += len(c.MetricData)
	}
	require.Equal(t, total, sum)
	require.Len(t, cw.calls, (total+metrics.MaxDatumsPerCall-1)/metrics.MaxDatumsPerCall)
}

func TestRunPublishesEveryIntervalAndOnceMoreWhenStopped(t *testing.T) {
	clk := testingclock.NewFakeClock(t0)
	cw := &fakeCloudWatch{errs: []error{errors.New("AccessDenied")}}
	pub := &metrics.Publisher{API: cw, Registry: metrics.NewRegistry(clk), Interval: time.Minute, Clock: clk}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- pub.Run(ctx) }()
	for i := 1; i <= 3; i++ {
		require.Eventually(t, clk.HasWaiters, 5*time.Second, time.Millisecond)
		clk.Step(time.Minute)
		require.Eventually(t, func() bool { return cw.callCount() == i }, 5*time.Second, time.Millisecond)
	}
	require.Equal(t, int64(1), pub.Failures(), "the first call failed; the agent went on")
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop on cancel")
	}
	require.Equal(t, 4, cw.callCount(), "a last publish on shutdown")
}

// TestC20AMIRejectedCarriesTheReasonDimension: each refusal reason of the AMI gate is its own series, with a
// third dimension Reason in CloudWatch and a reason label in Prometheus (field case C20).
func TestC20AMIRejectedCarriesTheReasonDimension(t *testing.T) {
	reg := metrics.NewRegistry(nil)
	tg := model.Target{Group: group, Platform: platform}
	reg.AMIRejected(tg, rec(state.PhaseWaiting, ""), model.AMIRejection{Reason: providers.RejectOwnerNotAllowed})
	reg.AMIRejected(tg, rec(state.PhaseWaiting, ""), model.AMIRejection{Reason: providers.RejectOwnerNotAllowed})
	reg.AMIRejected(tg, rec(state.PhaseWaiting, ""), model.AMIRejection{Reason: providers.RejectOSFamilyChange})
	cw := &fakeCloudWatch{}
	require.NoError(t, (&metrics.Publisher{API: cw, Registry: reg}).Publish(context.Background()))
	got := map[string]float64{}
	for _, d := range cw.calls[0].MetricData {
		if aws.ToString(d.MetricName) != metrics.AMIRejected {
			continue
		}
		require.Len(t, d.Dimensions, 3)
		require.Equal(t, "Reason", aws.ToString(d.Dimensions[2].Name))
		got[aws.ToString(d.Dimensions[2].Value)] = aws.ToFloat64(d.Value)
	}
	require.Equal(t, map[string]float64{providers.RejectOwnerNotAllowed: 2, providers.RejectOSFamilyChange: 1}, got)
	var b strings.Builder
	require.NoError(t, reg.WritePrometheus(&b))
	require.Contains(t, b.String(), `patch_agent_ami_rejected_total{group="web-asg",platform="ecs",reason="OwnerNotAllowed"} 2`)
}
