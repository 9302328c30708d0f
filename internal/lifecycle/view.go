package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// maxInstanceIDsPerDescribe bounds DescribeInstances requests: EC2 accepts up to 1000 instance ids per call
// (Amazon EC2 API Reference: DescribeInstances, InstanceIds; larger requests are split by the paginator).
const maxInstanceIDsPerDescribe = 1000

// InstanceView is one instance of a group as the rollout sees it in one tick.
type InstanceView struct {
	ID               string    `json:"id"`
	AvailabilityZone string    `json:"availabilityZone"`
	LifecycleState   string    `json:"lifecycleState"` // Auto Scaling lifecycle state: Pending, InService, Terminating:Wait, ...
	ImageID          string    `json:"imageId"`        // from EC2 DescribeInstances: the AMI the instance really runs
	LaunchTime       time.Time `json:"launchTime"`
	Protected        bool      `json:"protectedFromScaleIn,omitempty"`
	Node             NodeState `json:"node"`
}

// InService reports whether Auto Scaling counts the instance as in service.
func (i InstanceView) InService() bool {
	return i.LifecycleState == string(astypes.LifecycleStateInService)
}

// Leaving reports whether Auto Scaling is terminating the instance (any Terminating state, or Terminated).
func (i InstanceView) Leaving() bool {
	return strings.HasPrefix(i.LifecycleState, "Terminating") || i.LifecycleState == string(astypes.LifecycleStateTerminated)
}

// Serving reports whether the instance is in service and healthy in its cluster, and not draining: the
// capacity invariant 1 counts.
func (i InstanceView) Serving() bool { return i.InService() && i.Node.Healthy && !i.Node.Draining }

// GroupView is a group's capacity and instances in one tick.
type GroupView struct {
	Group      astypes.AutoScalingGroup `json:"-"`
	Name       string                   `json:"name"`
	Min        int32                    `json:"min"`
	Max        int32                    `json:"max"`
	Desired    int32                    `json:"desired"`
	Instances  []InstanceView           `json:"instances"` // sorted by launch time, then id
	ObservedAt time.Time                `json:"observedAt"`
	// WarmPool are the instances of the group's warm pool (Warmed:* states; WithWarmPool), which serve nothing
	// and are not among Instances; nil when the group has none or the tick did not look (idle targets).
	WarmPool []InstanceView `json:"warmPool,omitempty"`
}

// Instance returns the instance with the id, if the group has it.
func (v GroupView) Instance(id string) (InstanceView, bool) {
	for _, i := range v.Instances {
		if i.ID == id {
			return i, true
		}
	}
	return InstanceView{}, false
}

// CountServing returns how many instances are serving.
func (v GroupView) CountServing() int {
	n := 0
	for _, i := range v.Instances {
		if i.Serving() {
			n++
		}
	}
	return n
}

// CountOnImage returns how many in-service instances run imageID.
// Staying counts the group's instances that are not leaving it (Leaving): those an instance's status counts.
func (v GroupView) Staying() int {
	n := 0
	for _, i := range v.Instances {
		if !i.Leaving() {
			n++
		}
	}
	return n
}

func (v GroupView) CountOnImage(imageID string) int {
	n := 0
	for _, i := range v.Instances {
		if i.InService() && i.ImageID == imageID {
			n++
		}
	}
	return n
}

// ImageIDs returns the AMI of each given instance id from EC2 DescribeInstances, in batches. Instances EC2 no
// longer knows are absent from the result.
func ImageIDs(ctx context.Context, api awsapi.EC2, ids []string) (map[string]string, map[string]time.Time, error) {
	images, launched := map[string]string{}, map[string]time.Time{}
	for start := 0; start < len(ids); start += maxInstanceIDsPerDescribe {
		batch := ids[start:min(start+maxInstanceIDsPerDescribe, len(ids))]
		p := ec2.NewDescribeInstancesPaginator(api, &ec2.DescribeInstancesInput{InstanceIds: batch})
		for p.HasMorePages() {
			out, err := p.NextPage(ctx)
			if awsapi.IsInstanceNotFound(err) && len(batch) > 1 {
				// One id of the batch is gone: describe one at a time so the others are still seen.
				for _, id := range batch {
					im, la, err := ImageIDs(ctx, api, []string{id})
					if err != nil {
						return nil, nil, err
					}
					for k, v := range im {
						images[k], launched[k] = v, la[k]
					}
				}
				break
			}
			if awsapi.IsInstanceNotFound(err) {
				break
			}
			if err != nil {
				return nil, nil, fmt.Errorf("describing %d instances: %w", len(batch), err)
			}
			for _, r := range out.Reservations {
				for _, i := range r.Instances {
					images[aws.ToString(i.InstanceId)] = aws.ToString(i.ImageId)
					launched[aws.ToString(i.InstanceId)] = aws.ToTime(i.LaunchTime)
				}
			}
		}
	}
	return images, launched, nil
}

// BuildView joins a described group with the instances' AMIs and platform states.
func BuildView(g astypes.AutoScalingGroup, images map[string]string, launched map[string]time.Time, nodes map[string]NodeState, now time.Time) GroupView {
	v := GroupView{Group: g, Name: aws.ToString(g.AutoScalingGroupName), Min: aws.ToInt32(g.MinSize), Max: aws.ToInt32(g.MaxSize),
		Desired: aws.ToInt32(g.DesiredCapacity), ObservedAt: now}
	for _, i := range g.Instances {
		id := aws.ToString(i.InstanceId)
		v.Instances = append(v.Instances, InstanceView{ID: id, AvailabilityZone: aws.ToString(i.AvailabilityZone),
			LifecycleState: string(i.LifecycleState), ImageID: images[id], LaunchTime: launched[id],
			Protected: aws.ToBool(i.ProtectedFromScaleIn), Node: nodes[id]})
	}
	sort.Slice(v.Instances, func(a, b int) bool {
		x, y := v.Instances[a], v.Instances[b]
		if !x.LaunchTime.Equal(y.LaunchTime) {
			return x.LaunchTime.Before(y.LaunchTime)
		}
		return x.ID < y.ID
	})
	return v
}
