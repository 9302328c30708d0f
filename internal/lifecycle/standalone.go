package lifecycle

import (
	"context"
	"fmt"
	"strings"

	"github.com/patch-agent/patch-agent/internal/state"
)

// Tasks ECS will not move (docs/ecs.md, "Tasks ECS will not move").
//
// Amazon ECS Developer Guide, "Draining Amazon ECS container instances": DRAINING replaces service tasks on
// other instances; standalone tasks (RunTask, StartTask, an AWS Batch job) are not affected and must end by
// themselves. The agent never counts them as drained (ecsdrain.Status). What it does about them is the group's
// choice, TagStandaloneTasks:
//   - StandaloneWait (default): drain, and wait for them to end until the drain deadline; then put the instance
//     back in service and halt (drainOld);
//   - StandaloneRefuse: refuse the group — the rollout halts, without a rollback and before it surges or drains,
//     with a reason naming the instances and their standalone tasks.
const (
	TagStandaloneTasks = "patch-agent/standalone-tasks"
	StandaloneWait     = "wait"
	StandaloneRefuse   = "refuse"
)

// AWS Batch compute environments. AWS managed policy reference, "BatchServiceRolePolicy": AWS Batch creates
// and manages the Auto Scaling groups of most EC2 compute environments and may tag Auto Scaling resources only
// with the AWSBatchServiceTag request tag; the groups it creates are named "AWSBatch-<compute environment>-asg-
// <id>". AWS Batch User Guide, "Managed compute environments": Batch manages these groups, their launch
// templates and their ECS cluster, and modifying them by hand may leave the compute environment INVALID;
// the AMI of a compute environment is changed through Batch (UpdateComputeEnvironment; "Updating compute
// environments"). Its jobs run as standalone ECS tasks. The agent therefore refuses such a group, whatever its
// tags, before it changes anything.
const (
	TagAWSBatchService   = "AWSBatchServiceTag"
	awsBatchGroupPrefix  = "AWSBatch-"
	refusedAWSBatchGroup = "group %s refused: it belongs to an AWS Batch compute environment (%s): Batch manages its Auto Scaling group, launch template and ECS cluster, and its jobs are standalone tasks ECS does not move; update the compute environment's AMI through AWS Batch (UpdateComputeEnvironment) instead"
)

// ParseStandaloneTasks reads TagStandaloneTasks: "wait" (also when absent) or "refuse", in any letter case.
func ParseStandaloneTasks(v string) (string, error) {
	switch strings.ToLower(v) {
	case "", StandaloneWait:
		return StandaloneWait, nil
	case StandaloneRefuse:
		return StandaloneRefuse, nil
	}
	return "", fmt.Errorf("tag %s=%q: want wait or refuse", TagStandaloneTasks, v)
}

// awsBatchGroup returns why v is the group of an AWS Batch compute environment ("" when it is not): its tag
// TagAWSBatchService, or its name starting with "AWSBatch-".
func awsBatchGroup(v GroupView) string {
	if val, ok := groupTags(v.Group)[TagAWSBatchService]; ok {
		return fmt.Sprintf("tag %s=%s", TagAWSBatchService, val)
	}
	if strings.HasPrefix(v.Name, awsBatchGroupPrefix) {
		return "name " + v.Name
	}
	return ""
}

// refuseAWSBatchGroup halts, without a rollback and before any change, the rollout of a group that belongs to
// an AWS Batch compute environment. ok reports whether it did.
func (o *Orchestrator) refuseAWSBatchGroup(ctx context.Context, v GroupView, r state.Rollout) (state.Rollout, bool, error) {
	why := awsBatchGroup(v)
	if why == "" {
		return r, false, nil
	}
	next, err := o.halt(ctx, r, fmt.Sprintf(refusedAWSBatchGroup, v.Name, why), false)
	return next, true, err
}
