package model

import (
	"strings"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

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

// Warmed reports whether a warm pool instance has settled in its pool state (Warmed:Stopped, Warmed:Running,
// Warmed:Hibernated): out of every lifecycle action, not serving, and what a scale out draws on.
func (i InstanceView) Warmed() bool {
	switch astypes.LifecycleState(i.LifecycleState) {
	case astypes.LifecycleStateWarmedStopped, astypes.LifecycleStateWarmedRunning, astypes.LifecycleStateWarmedHibernated:
		return true
	}
	return false
}
