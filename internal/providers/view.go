package providers

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/aws/aws-sdk-go-v2/service/ec2"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
)

// maxInstanceIDsPerDescribe bounds DescribeInstances requests: EC2 accepts up to 1000 instance ids per call
// (Amazon EC2 API Reference: DescribeInstances, InstanceIds; larger requests are split by the paginator).
const maxInstanceIDsPerDescribe = 1000

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
func BuildView(g astypes.AutoScalingGroup, images map[string]string, launched map[string]time.Time, nodes map[string]model.NodeState, now time.Time) model.GroupView {
	v := model.GroupView{Group: g, Name: aws.ToString(g.AutoScalingGroupName), Min: aws.ToInt32(g.MinSize), Max: aws.ToInt32(g.MaxSize),
		Desired: aws.ToInt32(g.DesiredCapacity), ObservedAt: now}
	for _, i := range g.Instances {
		id := aws.ToString(i.InstanceId)
		v.Instances = append(v.Instances, model.InstanceView{ID: id, AvailabilityZone: aws.ToString(i.AvailabilityZone),
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
