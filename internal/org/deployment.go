package org

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ssm"

	"github.com/patch-agent/patch-agent/internal/awsapi"
)

// DefaultDeployment is the agent stack's DeploymentName parameter by default, and --deployment's.
const DefaultDeployment = "patch-agent"

// ParameterPrefix starts the name of every SSM parameter the agent's stack publishes its names in.
const ParameterPrefix = "/patch-agent/"

// deploymentName is what DeploymentName allows (the template's AllowedPattern).
var deploymentName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// ParameterName returns the SSM parameter in which the agent's stack of deployment publishes its names:
// /patch-agent/<deployment>/store. The deployment name is a stack parameter, not the stack's own name,
// because StackSets name each stack instance StackSet-<set>-<uuid>: one name then finds the stack in every
// account, and two stacks in one account take two names (the second stack with a name in use fails to
// create its parameter, instead of silently sharing it).
func ParameterName(deployment string) string { return ParameterPrefix + deployment + "/store" }

// CheckDeployment returns an error when name cannot be a DeploymentName.
func CheckDeployment(name string) error {
	if !deploymentName.MatchString(name) {
		return fmt.Errorf("--deployment %q: want the agent stack's DeploymentName (letters, digits, _ . -, at most 64; default %s)", name, DefaultDeployment)
	}
	return nil
}

// Deployment is what the agent's stack publishes in ParameterName: the names an operator needs, without the
// console.
type Deployment struct {
	// Table is the agent's DynamoDB table; QueueURL its queue; WakeUpQueueURL its wake-up queue ("" for a
	// stack without one: wake-ups go to QueueURL).
	Table          string `json:"table"`
	QueueURL       string `json:"queueUrl"`
	WakeUpQueueURL string `json:"wakeUpQueueUrl"`
	// Stack is the stack's name (StackSet-<set>-<uuid> under StackSets), for messages.
	Stack string `json:"stack"`
}

// WakeQueue is the queue operator wake-ups go to: the wake-up queue, else the main queue.
func (d Deployment) WakeQueue() string {
	if d.WakeUpQueueURL != "" {
		return d.WakeUpQueueURL
	}
	return d.QueueURL
}

// Locate reads the Deployment of deployment from the account's Parameter Store (one GetParameters). Errors:
// the read, a parameter that does not exist (the stack is not deployed there, or under another
// DeploymentName), or a value that names no table.
func Locate(ctx context.Context, api awsapi.ReadOnlySSM, deployment string) (Deployment, error) {
	name := ParameterName(deployment)
	out, err := api.GetParameters(ctx, &ssm.GetParametersInput{Names: []string{name}})
	if err != nil {
		return Deployment{}, fmt.Errorf("reading SSM parameter %s: %w", name, err)
	}
	if len(out.Parameters) == 0 {
		return Deployment{}, fmt.Errorf("no SSM parameter %s: the agent's stack is not deployed in this account and region, "+
			"or under another DeploymentName (--deployment)", name)
	}
	var d Deployment
	if err := json.Unmarshal([]byte(aws.ToString(out.Parameters[0].Value)), &d); err != nil || strings.TrimSpace(d.Table) == "" {
		return Deployment{}, fmt.Errorf("SSM parameter %s does not hold the stack's names as JSON {\"table\": ...}: %q", name, aws.ToString(out.Parameters[0].Value))
	}
	return d, nil
}

// Value returns d as the parameter's value (what the stack writes).
func (d Deployment) Value() string {
	b, _ := json.Marshal(d)
	return string(b)
}
