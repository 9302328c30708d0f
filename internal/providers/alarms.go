package providers

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// CloudWatchAlarms implements AlarmChecker with DescribeAlarms (100 names per call).
type CloudWatchAlarms struct {
	API awsapi.CloudWatch
}

// InAlarm implements AlarmChecker. An alarm name that does not exist is reported as an error, so a typo in
// a tag holds the rollout rather than silently disabling the gate.
func (c CloudWatchAlarms) InAlarm(ctx context.Context, names []string) ([]string, error) {
	var firing []string
	seen := map[string]bool{}
	for start := 0; start < len(names); start += 100 {
		batch := names[start:min(start+100, len(names))]
		p := cloudwatch.NewDescribeAlarmsPaginator(c.API, &cloudwatch.DescribeAlarmsInput{AlarmNames: batch,
			AlarmTypes: []cwtypes.AlarmType{cwtypes.AlarmTypeMetricAlarm, cwtypes.AlarmTypeCompositeAlarm}})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if err != nil {
				return nil, fmt.Errorf("describing alarms %s: %w", strings.Join(batch, ", "), err)
			}
			for _, a := range out.MetricAlarms {
				seen[aws.ToString(a.AlarmName)] = true
				if a.StateValue == cwtypes.StateValueAlarm {
					firing = append(firing, aws.ToString(a.AlarmName))
				}
			}
			for _, a := range out.CompositeAlarms {
				seen[aws.ToString(a.AlarmName)] = true
				if a.StateValue == cwtypes.StateValueAlarm {
					firing = append(firing, aws.ToString(a.AlarmName))
				}
			}
		}
	}
	var missing []string
	for _, n := range names {
		if !seen[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return firing, fmt.Errorf("alarm(s) %s do not exist", strings.Join(missing, ", "))
	}
	return firing, nil
}
