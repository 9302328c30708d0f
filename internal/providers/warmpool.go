package providers

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
)

// WarmPool is the instances of a group's warm pool as DescribeWarmPool describes them.
type WarmPool []astypes.Instance

// IDs returns the instance ids.
func (p WarmPool) IDs() []string {
	ids := make([]string, len(p))
	for i, inst := range p {
		ids[i] = aws.ToString(inst.InstanceId)
	}
	return ids
}

// WarmPoolInstances lists the instances of a group's warm pool (DescribeWarmPool, every page of at most 50).
// A group without a warm pool has none. Errors are the API's, wrapped.
func WarmPoolInstances(ctx context.Context, api awsapi.AutoScaling, group string) (WarmPool, error) {
	var out WarmPool
	var token *string
	for {
		page, err := api.DescribeWarmPool(ctx, &autoscaling.DescribeWarmPoolInput{AutoScalingGroupName: aws.String(group),
			MaxRecords: aws.Int32(50), NextToken: token})
		if err != nil {
			return nil, fmt.Errorf("describing the warm pool of %s: %w", group, err)
		}
		out = append(out, page.Instances...)
		if token = page.NextToken; token == nil || aws.ToString(token) == "" {
			return out, nil
		}
	}
}

// WithWarmPool returns v with the instances of the group's warm pool (as WarmPoolInstances lists them), their
// AMIs from images.
func WithWarmPool(v model.GroupView, pool WarmPool, images map[string]string, launched map[string]time.Time) model.GroupView {
	v.WarmPool = []model.InstanceView{}
	for _, i := range pool {
		id := aws.ToString(i.InstanceId)
		v.WarmPool = append(v.WarmPool, model.InstanceView{ID: id, AvailabilityZone: aws.ToString(i.AvailabilityZone),
			LifecycleState: string(i.LifecycleState), ImageID: images[id], LaunchTime: launched[id]})
	}
	return v
}

// HasWarmPool reports whether the described group has a warm pool.
func HasWarmPool(g astypes.AutoScalingGroup) bool { return g.WarmPoolConfiguration != nil }

// poolSize is the description's WarmPoolSize (0 when it has none).
func PoolSize(g astypes.AutoScalingGroup) int32 { return aws.ToInt32(g.WarmPoolSize) }
