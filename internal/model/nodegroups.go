package model

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// TagNodegroupName is the tag EKS puts on the Auto Scaling group of a managed node group (Amazon EKS User
// Guide, "Simplify node lifecycle with managed node groups").
const TagNodegroupName = "eks:nodegroup-name"

// PlatformEKSManaged is the Platform of a managed node group target's record.
const PlatformEKSManaged = "eks-managed"

// NodegroupKey is the record key (Target.Group) of a managed node group: "nodegroup/<cluster>/<name>". It
// names no Auto Scaling group, so no group's record is ever confused with it.
func NodegroupKey(cluster, name string) string { return "nodegroup/" + cluster + "/" + name }

// UpdateConfigWords says a managed node group's updateConfig as status and the rollback plan show it: its
// maxUnavailablePercentage or maxUnavailable, else EKS's default of one node at a time (Amazon EKS API
// Reference, NodegroupUpdateConfig).
func UpdateConfigWords(maxUnavailable, maxUnavailablePercentage int32) string {
	switch {
	case maxUnavailablePercentage > 0:
		return fmt.Sprintf("maxUnavailablePercentage %d", maxUnavailablePercentage)
	case maxUnavailable > 0:
		return fmt.Sprintf("maxUnavailable %d", maxUnavailable)
	}
	return "maxUnavailable 1, EKS's default"
}

// Nodegroup is a managed node group as DescribeNodegroup reports it.
type Nodegroup struct {
	Cluster, Name string
	// Version is the node group's Kubernetes version, ReleaseVersion its AMI release ("" for CUSTOM).
	Version, ReleaseVersion string
	AMIType                 string
	// Status is ACTIVE, UPDATING, DEGRADED ...
	Status string
	// LaunchTemplate is the node group's launch template (id or name, and version), nil without one.
	LaunchTemplate *state.LaunchTemplateRef
	// AutoScalingGroups are the groups EKS runs the node group on (resources.autoScalingGroups).
	AutoScalingGroups []string
	Tags              map[string]string
	// MaxUnavailable / MaxUnavailablePercentage: the node group's updateConfig (0 when unset). EKS applies it.
	MaxUnavailable, MaxUnavailablePercentage int32
}

// NodegroupUpdateRequest is one UpdateNodegroupVersion: to ReleaseVersion (AMI types) or to the launch
// template version LaunchTemplate (CUSTOM), with Token as ClientRequestToken.
type NodegroupUpdateRequest struct {
	Cluster, Name  string
	ReleaseVersion string
	// Version is the Kubernetes version of ReleaseVersion when it is newer than the node group's ("": the
	// node group's own).
	Version        string
	LaunchTemplate *state.LaunchTemplateRef
	Token          string
	// Force makes EKS replace nodes whose pods a PodDisruptionBudget keeps from being evicted (Amazon EKS API
	// Reference, UpdateNodegroupVersion: force). The agent never sets it on its own.
	Force bool
}

// NodegroupUpdate is an update as DescribeUpdate reports it: Status InProgress, Successful, Failed or
// Cancelled; Errors "<code>: <message>" of a failed update (PodEvictionFailure ...).
type NodegroupUpdate struct {
	ID, Status string
	Errors     []string
}

// ResolvedRelease is the release a release parameter names at one moment: Release its value (the release
// version), ImageID the AMI of the sibling image_id parameter ("" when it has none), LastModified the release
// parameter's LastModifiedDate (soak is measured from it), Version its parameter Version (informational only).
type ResolvedRelease struct {
	Parameter, Release, ImageID string
	Version                     int64
	LastModified                time.Time
}

// ErrManagedNodegroupGroup is wrapped by the error of an opted-in Auto Scaling group that EKS runs a managed
// node group on (tag eks:nodegroup-name). EKS replaces and drains its nodes itself (and owns its lifecycle
// hooks), so the agent never rolls it as a plain group, never drains, cordons or terminates its instances and
// never completes its lifecycle actions: Discover lists it as misconfigured (not drainable), with this reason.
// Tag the node group itself to have the agent roll it.
var ErrManagedNodegroupGroup = errors.New("the Auto Scaling group of an EKS managed node group is never rolled as a group")

// managedNodegroupGroup returns an error wrapping ErrManagedNodegroupGroup when tags are those of a managed node
// group's Auto Scaling group, nil otherwise.
func ManagedNodegroupGroup(group string, tags map[string]string) error {
	ng, ok := tags[TagNodegroupName]
	if !ok {
		return nil
	}
	return fmt.Errorf("group %s is opted in but not rolled: %w (it carries %s=%s: EKS drains and replaces its nodes; tag the managed node group %s instead)",
		group, ErrManagedNodegroupGroup, TagNodegroupName, ng, ng)
}

// NodegroupAPI is what the managed node group rollout asks of EKS (NodegroupClient implements it over
// awsapi.EKSNodegroups).
type NodegroupAPI interface {
	StartUpdate(ctx context.Context, req NodegroupUpdateRequest) (NodegroupUpdate, error)
	DescribeUpdate(ctx context.Context, cluster, name, id string) (NodegroupUpdate, error)
}

// NodegroupInputs are what one tick knows about a managed node group target (Inputs.Nodegroup). Inputs.View is
// the node group's own Auto Scaling group, read only (the AMI gate's instance types, the counts on status);
// Inputs.AMI is the resolved AMI parameter of a CUSTOM node group.
type NodegroupInputs struct {
	// Nodegroup as described this tick.
	Nodegroup Nodegroup
	// ControlPlane is the cluster's Kubernetes version ("1.31"): the node group never goes past it.
	ControlPlane string
	// TargetVersion is the Kubernetes version whose releases the node group follows: its own, or the control
	// plane's when that is newer (after the control plane's upgrade the node group follows it; Amazon EKS User
	// Guide, "Update a managed node group for your cluster"). "" for CUSTOM.
	TargetVersion string
	// Release is the release parameter of TargetVersion and the node group's AMI type, resolved this tick
	// (nil for CUSTOM, or when the parameter is missing).
	Release *ResolvedRelease
	// CurrentImage is the AMI the node group's launch template launches now (CUSTOM), "" when unknown.
	CurrentImage string
}
