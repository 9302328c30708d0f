package state

// StepNodegroupUpdate is the one step of an EKS managed node group's rollout: an UpdateNodegroupVersion that
// EKS carries out itself (it launches, drains and terminates the nodes; Amazon EKS User Guide, "Understand each
// phase of node updates"), tracked through DescribeUpdate. The record holds the ClientRequestToken before the
// call is sent and the update id after, so a crash at any point resumes with the same update, never a second.
const StepNodegroupUpdate Step = "NodegroupUpdate"

// NodegroupProgress is the durable progress of an EKS managed node group's rollout (Rollout.Nodegroup; nil
// for Auto Scaling group targets).
type NodegroupProgress struct {
	Cluster string `json:"cluster" dynamodbav:"cluster"`
	Name    string `json:"name" dynamodbav:"name"`
	// AMIType is the node group's AMI type (AL2023_x86_64_STANDARD, BOTTLEROCKET_ARM_64, CUSTOM ...).
	AMIType string `json:"amiType" dynamodbav:"amiType"`
	// KubernetesVersion is the node group's Kubernetes version ("1.31"); the release never goes past the
	// control plane's.
	KubernetesVersion string `json:"kubernetesVersion,omitempty" dynamodbav:"k8s,omitempty"`
	// TargetVersion is the Kubernetes version the update moves the node group to when it is newer than
	// KubernetesVersion (the control plane moved first: the node group follows it); "" otherwise.
	TargetVersion string `json:"targetVersion,omitempty" dynamodbav:"targetVersion,omitempty"`
	// TargetRelease and PreviousRelease are AMI release versions ("1.31.7-20250610") of a node group of an
	// AMI type; empty for CUSTOM.
	TargetRelease   string `json:"targetRelease,omitempty" dynamodbav:"targetRelease,omitempty"`
	PreviousRelease string `json:"previousRelease,omitempty" dynamodbav:"previousRelease,omitempty"`
	// LaunchTemplateID is the node group's own launch template (CUSTOM: the one that names the AMI), with the
	// version it ran before (PreviousTemplateVersion) and the version the agent created with the target AMI.
	LaunchTemplateID        string `json:"launchTemplateId,omitempty" dynamodbav:"ltID,omitempty"`
	LaunchTemplateName      string `json:"launchTemplateName,omitempty" dynamodbav:"ltName,omitempty"`
	PreviousTemplateVersion string `json:"previousTemplateVersion,omitempty" dynamodbav:"prevLT,omitempty"`
	TargetTemplateVersion   string `json:"targetTemplateVersion,omitempty" dynamodbav:"targetLT,omitempty"`
	// UpdateToken is the ClientRequestToken of the update in flight, written before UpdateNodegroupVersion is
	// sent; UpdateID the id EKS returned, written after. A repeat with the same token is the same update (Amazon
	// EKS API Reference, UpdateNodegroupVersion: clientRequestToken).
	UpdateToken  string `json:"updateToken,omitempty" dynamodbav:"updateToken,omitempty"`
	UpdateID     string `json:"updateId,omitempty" dynamodbav:"updateId,omitempty"`
	UpdateStatus string `json:"updateStatus,omitempty" dynamodbav:"updateStatus,omitempty"`
	// UpdateErrors are the errors EKS reported for a failed update ("PodEvictionFailure: ...").
	UpdateErrors []string `json:"updateErrors,omitempty" dynamodbav:"updateErrors,omitempty"`
	// Rollback: the update in flight moves the node group back to PreviousRelease / PreviousTemplateVersion.
	Rollback bool `json:"rollback,omitempty" dynamodbav:"rollback,omitempty"`
	// RequestedBy names the operator whose `patch-agent rollback` started the rollback update; "" for the
	// agent's own rollback after a failed update.
	RequestedBy string `json:"requestedBy,omitempty" dynamodbav:"requestedBy,omitempty"`
	// MaxUnavailable / MaxUnavailablePercentage are the node group's updateConfig as EKS reported it: shown on
	// status and left to EKS (0 when unset).
	MaxUnavailable           int32 `json:"maxUnavailable,omitempty" dynamodbav:"maxUnavailable,omitempty"`
	MaxUnavailablePercentage int32 `json:"maxUnavailablePercentage,omitempty" dynamodbav:"maxUnavailablePct,omitempty"`
}

// Custom reports whether the node group's AMI comes from its launch template (AMI type CUSTOM).
func (p NodegroupProgress) Custom() bool { return p.AMIType == "CUSTOM" }

func cloneNodegroup(p *NodegroupProgress) *NodegroupProgress {
	if p == nil {
		return nil
	}
	c := *p
	c.UpdateErrors = append([]string(nil), p.UpdateErrors...)
	return &c
}
