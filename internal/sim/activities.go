package sim

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// Shortfall makes a group's launches fail for lack of EC2 capacity (SetLaunchShortfall).
type Shortfall struct {
	// Spot makes it a Spot shortfall ("Could not launch Spot Instances. InsufficientInstanceCapacity - There is
	// no Spot capacity available that matches your request."); otherwise On-Demand InsufficientInstanceCapacity
	// in the Availability Zone the launch went to.
	Spot bool
	// Retry is how often Auto Scaling tries the launch again (one failed scaling activity per try); default 1
	// minute.
	Retry time.Duration

	last time.Time // when the last failed activity was recorded
}

// scalingActivity is one recorded scaling activity of a group.
type scalingActivity struct {
	astypes.Activity
}

// SetLaunchShortfall makes every launch of the group fail for lack of capacity until ClearLaunchShortfall: the
// group stays below its desired capacity and each try is a scaling activity with StatusCode Failed and a
// StatusMessage naming the cause, which DescribeScalingActivities lists; Auto Scaling keeps trying (Amazon EC2
// Auto Scaling User Guide, "Troubleshoot Amazon EC2 Auto Scaling: EC2 instance launch failures" —
// "We currently do not have sufficient <type> capacity in the Availability Zone you requested..." — and
// "Verify a scaling activity for an Auto Scaling group"). Warm pool draws are not affected. Setup helper.
func (as *autoScalingService) SetLaunchShortfall(group string, s Shortfall) {
	defer as.lock()()
	if as.shortfalls == nil {
		as.shortfalls = map[string]*Shortfall{}
	}
	if s.Retry <= 0 {
		s.Retry = time.Minute
	}
	as.shortfalls[group] = &s
	as.settle()
}

// ClearLaunchShortfall ends SetLaunchShortfall: the group's next launch try succeeds. Setup helper.
func (as *autoScalingService) ClearLaunchShortfall(group string) {
	defer as.lock()()
	delete(as.shortfalls, group)
	as.settle()
	// Auto Scaling tries again on its own schedule: the next try happens within the retry interval.
}

// FailedLaunches returns how many failed launch activities the group recorded.
func (as *autoScalingService) FailedLaunches(group string) int {
	defer as.lock()()
	return len(as.activities[group])
}

// launchFails reports whether a launch of g fails now for lack of capacity, recording the failed scaling
// activity of the try (at most one per Shortfall.Retry; between tries the launch waits). Callers hold the lock.
func (as *autoScalingService) launchFails(g *group) bool {
	s := as.shortfalls[g.name]
	if s == nil {
		return false
	}
	now := as.now()
	if !s.last.IsZero() && now.Sub(s.last) < s.Retry {
		return true
	}
	s.last = now
	az := as.pickAZ(g)
	_, v := as.currentVersion(g)
	itype := "m5.large"
	if v != nil && v.instanceType != "" {
		itype = v.instanceType
	}
	msg := fmt.Sprintf("We currently do not have sufficient %s capacity in the Availability Zone you requested (%s). Our system will be working on provisioning additional capacity. Launching EC2 instance failed.", itype, az)
	if s.Spot {
		msg = "Could not launch Spot Instances. InsufficientInstanceCapacity - There is no Spot capacity available that matches your request. Launching EC2 instance failed."
	}
	running := int32(len(as.running(g)))
	if as.activities == nil {
		as.activities = map[string][]scalingActivity{}
	}
	as.activities[g.name] = append(as.activities[g.name], scalingActivity{astypes.Activity{
		ActivityId:           ptr(as.uuid()),
		AutoScalingGroupName: ptr(g.name),
		AutoScalingGroupARN:  ptr(g.arn),
		Cause: ptr(fmt.Sprintf("At %s an instance was started in response to a difference between desired and actual capacity, increasing the capacity from %d to %d.",
			now.UTC().Format(time.RFC3339), running, running+1)),
		Description:   ptr("Launching a new EC2 instance.  Status Reason: " + msg),
		Details:       ptr(fmt.Sprintf(`{"Subnet ID":"subnet-%s","Availability Zone":"%s"}`, az, az)),
		StartTime:     ptr(now),
		EndTime:       ptr(now),
		StatusCode:    astypes.ScalingActivityStatusCodeFailed,
		StatusMessage: ptr(msg),
		Progress:      ptr(int32(100)),
	}})
	// Auto Scaling tries again: a settle at the next retry time.
	as.after(s.Retry, func() {})
	return true
}

// DescribeScalingActivities lists a group's scaling activities, newest first, up to MaxRecords (default and
// at most 100) a page with NextToken. The simulation records the launches that failed for lack of capacity
// (SetLaunchShortfall); other activities are not listed. Amazon EC2 Auto Scaling API Reference,
// "DescribeScalingActivities" (activities of the last six weeks, newest first; StatusCode Failed with a
// StatusMessage for a launch that failed). Errors: ValidationError (no group name, MaxRecords above 100, an
// invalid NextToken).
func (c *AutoScalingClient) DescribeScalingActivities(ctx context.Context, in *autoscaling.DescribeScalingActivitiesInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeScalingActivitiesOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:DescribeScalingActivities")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "the simulation needs AutoScalingGroupName")
	}
	limit := 100
	if in.MaxRecords != nil {
		if *in.MaxRecords < 1 || *in.MaxRecords > 100 {
			return nil, apiError("ValidationError", "1 validation error detected: Value '%d' at 'maxRecords' failed to satisfy constraint: Member must have value less than or equal to 100", *in.MaxRecords)
		}
		limit = int(*in.MaxRecords)
	}
	start := 0
	if in.NextToken != nil {
		n, err := strconv.Atoi(*in.NextToken)
		if err != nil || n < 0 {
			return nil, apiError("ValidationError", "The token '%s' is invalid.", *in.NextToken)
		}
		start = n
	}
	acts := as.activities[*in.AutoScalingGroupName]
	out := &autoscaling.DescribeScalingActivitiesOutput{Activities: []astypes.Activity{}}
	for i := len(acts) - 1 - start; i >= 0 && len(out.Activities) < limit; i-- {
		out.Activities = append(out.Activities, acts[i].Activity)
	}
	if next := start + len(out.Activities); next < len(acts) {
		out.NextToken = ptr(strconv.Itoa(next))
	}
	return out, nil
}
