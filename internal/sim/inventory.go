package sim

import (
	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// ReadOnlyAutoScaling returns the account's Auto Scaling API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyAutoScaling() awsapi.ReadOnlyAutoScaling {
	return &AutoScalingClient{s: a.autoScaling}
}

// ReadOnlyEC2 returns the account's EC2 API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyEC2() awsapi.ReadOnlyEC2 { return &EC2Client{s: a.ec2} }

// ReadOnlyECS returns the account's ECS API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyECS() awsapi.ReadOnlyECS { return &ECSClient{s: a.ecs} }

// ReadOnlyEKS returns the account's EKS API as `patch-agent audit` uses it.
func (a *Account) ReadOnlyEKS() awsapi.ReadOnlyEKS { return &EKSClient{s: a.eks} }

// ReadOnlySSM returns the account's Parameter Store API as `patch-agent audit` uses it.
func (a *Account) ReadOnlySSM() awsapi.ReadOnlySSM { return &SSMClient{s: a.ssm} }

var (
	_ awsapi.ReadOnlyAutoScaling = (*AutoScalingClient)(nil)
	_ awsapi.ReadOnlyEC2         = (*EC2Client)(nil)
	_ awsapi.ReadOnlyECS         = (*ECSClient)(nil)
	_ awsapi.ReadOnlyEKS         = (*EKSClient)(nil)
	_ awsapi.ReadOnlySSM         = (*SSMClient)(nil)
	_ awsapi.MetricData          = (*CloudWatchClient)(nil)
)
