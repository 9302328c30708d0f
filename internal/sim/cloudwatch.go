package sim

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
)

// cloudWatchService is Amazon CloudWatch: alarm states and the metrics the agent published (observability.go).
type cloudWatchService struct {
	*world

	alarms           map[string]string // alarm name -> state value (OK, ALARM, INSUFFICIENT_DATA)
	publishedMetrics []PublishedMetric
}

// CloudWatchClient is the simulated CloudWatch API: metric alarms whose state tests set.
type CloudWatchClient struct{ s *cloudWatchService }

// SetAlarm creates or updates a metric alarm's state (OK, ALARM or INSUFFICIENT_DATA). Setup helper: not
// counted.
func (s *cloudWatchService) SetAlarm(name, stateValue string) {
	defer s.lock()()
	s.alarms[name] = stateValue
}

// DescribeAlarms returns the named metric alarms (names that do not exist are left out, as CloudWatch does).
// Amazon CloudWatch API Reference, "DescribeAlarms": AlarmNames up to 100.
func (c *CloudWatchClient) DescribeAlarms(ctx context.Context, in *cloudwatch.DescribeAlarmsInput, _ ...func(*cloudwatch.Options)) (*cloudwatch.DescribeAlarmsOutput, error) {
	s := c.s
	unlock, err := s.call(ctx, "cloudwatch:DescribeAlarms")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if len(in.AlarmNames) > 100 {
		return nil, apiError("InvalidParameterValue", "AlarmNames: at most 100 names")
	}
	out := &cloudwatch.DescribeAlarmsOutput{}
	for _, n := range in.AlarmNames {
		if st, ok := s.alarms[n]; ok {
			out.MetricAlarms = append(out.MetricAlarms, cwtypes.MetricAlarm{AlarmName: ptr(n), StateValue: cwtypes.StateValue(st)})
		}
	}
	return out, nil
}

// alarm returns the alarm's state value (OK, ALARM, INSUFFICIENT_DATA) and whether the alarm exists.
func (s *cloudWatchService) alarm(name string) (state string, ok bool) {
	state, ok = s.alarms[name]
	return state, ok
}
