package engine

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/patch-agent/patch-agent/internal/ecsdrain"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
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

// awsBatchGroup returns why v is the group of an AWS Batch compute environment ("" when it is not): its tag
// TagAWSBatchService, or its name starting with "AWSBatch-".
func awsBatchGroup(v model.GroupView) string {
	if val, ok := providers.GroupTags(v.Group)[TagAWSBatchService]; ok {
		return fmt.Sprintf("tag %s=%s", TagAWSBatchService, val)
	}
	if strings.HasPrefix(v.Name, awsBatchGroupPrefix) {
		return "name " + v.Name
	}
	return ""
}

// refuseAWSBatchGroup halts, without a rollback and before any change, the rollout of a group that belongs to
// an AWS Batch compute environment. ok reports whether it did.
func (o *Orchestrator) refuseAWSBatchGroup(ctx context.Context, v model.GroupView, r state.Rollout) (state.Rollout, bool, error) {
	why := awsBatchGroup(v)
	if why == "" {
		return r, false, nil
	}
	next, err := o.halt(ctx, r, fmt.Sprintf(refusedAWSBatchGroup, v.Name, why), false)
	return next, true, err
}

// standaloneRefusal returns why the group is refused ("" when it is not): the target is tagged
// TagStandaloneTasks=refuse and one of the instances ids runs standalone tasks (ecsdrain.Room.Standalone).
// Platforms that cannot tell (EKS) and instances without a container instance refuse nothing.
func standaloneRefusal(ctx context.Context, t model.Target, platform model.Platform, ids []string) (string, error) {
	rp, ok := platform.(providers.ClusterRoom)
	if t.Policy.StandaloneTasks != model.StandaloneRefuse || !ok {
		return "", nil
	}
	var found []string
	for _, id := range ids {
		room, err := rp.Room(ctx, t.Cluster, id)
		if errors.Is(err, ecsdrain.ErrNotRegistered) {
			continue
		}
		if err != nil {
			return "", err
		}
		if room.Standalone > 0 {
			found = append(found, fmt.Sprintf("%s (%d)", id, room.Standalone))
		}
	}
	if len(found) == 0 {
		return "", nil
	}
	return fmt.Sprintf("group refused (tag %s=%s): standalone task(s) (started by no service: RunTask, StartTask, AWS Batch) on %s, which ECS does not move off a DRAINING instance; stop them, or tag %s=%s to wait for them up to the drain deadline",
		model.TagStandaloneTasks, model.StandaloneRefuse, strings.Join(found, ", "), model.TagStandaloneTasks, model.StandaloneWait), nil
}

// outdatedIDs returns the ids of the group's outdated instances that the rollout has still to replace.
func outdatedIDs(v model.GroupView, r state.Rollout) []string {
	var out []string
	for _, i := range v.Instances {
		if !i.Leaving() && i.ImageID != r.TargetImageID && !slices.Contains(r.Replaced, i.ID) {
			out = append(out, i.ID)
		}
	}
	return out
}

// haltOr returns err when set, else halts r without a rollback for reason (standaloneRefusal's).
func (o *Orchestrator) haltOr(ctx context.Context, r state.Rollout, reason string, err error) (state.Rollout, error) {
	if err != nil {
		return r, err
	}
	return o.halt(ctx, r, reason, false)
}
