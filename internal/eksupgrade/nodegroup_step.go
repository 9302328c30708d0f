package eksupgrade

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	awseks "github.com/aws/aws-sdk-go-v2/service/eks"
	ekstypes "github.com/aws/aws-sdk-go-v2/service/eks/types"

	"github.com/patch-agent/patch-agent/internal/eks"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// The managed node group step (docs/eks-upgrade.md, "Why the hand-over") hands the node group over to the
// agent's managed-node-group rollout (internal/engine/rollout_nodegroup.go) instead of calling
// UpdateNodegroupVersion itself: once the control plane is on the target version, the agent's rollout of an
// opted-in node group follows it (the target version's release parameter), through the same gates as every
// rollout (the AMI gate, pause, soak, approval, maintenance window, alarms), with its record
// nodegroup/<cluster>/<name>, its history and its rollback after a failed update. The workflow only reads: the
// rollout record (state store) and DescribeNodegroup. One writer per node group (the agent) means no two
// processes ever send its updates.

// managedNodegroupAction is the step's action for a node group the agent does not manage.
const managedNodegroupAction = "opt the managed node group in (tag %s=true on the node group) so the agent's managed-node-group rollout moves it to Kubernetes %s " +
	"through its gates (once opted in, the agent does so on its own: the workflow is not run again), or update it yourself (the workflow never calls UpdateNodegroupVersion)"

// describeNodegroup reads the step's managed node group as the agent does (model.Nodegroup); found is false
// when EKS does not know it.
func (r *Runner) describeNodegroup(ctx context.Context, cluster, name string) (ng model.Nodegroup, found bool, err error) {
	out, err := r.EKS.DescribeNodegroup(ctx, &awseks.DescribeNodegroupInput{ClusterName: aws.String(cluster), NodegroupName: aws.String(name)})
	var notFound *ekstypes.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		return model.Nodegroup{}, false, nil
	case err != nil:
		return model.Nodegroup{}, false, fmt.Errorf("describing managed node group %s of EKS cluster %s: %w", name, cluster, err)
	case out.Nodegroup == nil:
		return model.Nodegroup{}, false, fmt.Errorf("describing managed node group %s of EKS cluster %s: empty response", name, cluster)
	}
	n := out.Nodegroup
	ng = model.Nodegroup{Cluster: cluster, Name: name, Version: aws.ToString(n.Version), ReleaseVersion: aws.ToString(n.ReleaseVersion),
		AMIType: string(n.AmiType), Status: string(n.Status), Tags: n.Tags}
	if lt := n.LaunchTemplate; lt != nil {
		ng.LaunchTemplate = &state.LaunchTemplateRef{ID: aws.ToString(lt.Id), Name: aws.ToString(lt.Name), Version: aws.ToString(lt.Version)}
	}
	return ng, true, nil
}

// handOverNodegroup starts the managed node group step: a node group that no longer exists, or one the agent
// does not manage that is already on the target version, is Skipped; a CUSTOM one, or one the agent does not
// manage (not opted in, or misconfigured: providers.NodegroupTarget), is ActionRequired; any other is handed
// over to the agent's rollout (InProgress, "managed-nodegroup-handed-over"), even when it is on the target
// version already (the rollout may have moved it before the step began), and the step then waits for the
// rollout's record and the node group to be on the target (followNodegroup).
func (r *Runner) handOverNodegroup(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	st := &w.Steps[w.Current]
	if st.Status == state.StepStatusInProgress {
		return r.followNodegroup(ctx, w)
	}
	ng, found, err := r.describeNodegroup(ctx, w.Cluster, st.Name)
	if err != nil {
		return w, err
	}
	now := r.now()
	st.By, st.StartedAt = r.Who, now
	w.Phase, w.Reason = state.WorkflowRunning, ""
	event, detail := "", ""
	target, terr := providers.NodegroupTarget(ng)
	switch {
	case !found:
		st.Status, event, detail = state.StepStatusSkipped, "skipped", "the node group no longer exists"
	case ng.AMIType == string(ekstypes.AMITypesCustom):
		st.Status, event = state.StepStatusActionRequired, "action-required"
		st.Action = fmt.Sprintf("the node group runs a custom AMI: publish an AMI built for Kubernetes %s to the AMI parameter its rollout follows (tag %s), or put one in its launch template and update it", st.To, model.TagParameter)
	case terr != nil:
		st.Status, event = state.StepStatusActionRequired, "action-required"
		st.Action = fmt.Sprintf(managedNodegroupAction, model.TagEnabled, st.To) + ": " + terr.Error()
	case target == nil && ng.Version == st.To:
		st.Status, event, detail = state.StepStatusSkipped, "skipped", "the node group is already at "+st.To
	case target == nil:
		st.Status, event = state.StepStatusActionRequired, "action-required"
		st.Action = fmt.Sprintf(managedNodegroupAction, model.TagEnabled, st.To)
	}
	if event != "" {
		st.CompletedAt = now
		if st.Action != "" {
			detail = st.Action
		} else {
			st.Detail = detail
		}
		done := *st
		w.Current++
		return r.save(ctx, w, fmt.Sprintf("%s %s: %s", done.Kind, done.Name, detail), r.entry(w, done.Kind+"-"+event, done, detail))
	}
	st.Status = state.StepStatusInProgress
	return r.save(ctx, w, fmt.Sprintf("managed node group %s handed over to the agent's managed-node-group rollout: waiting for it on Kubernetes %s", st.Name, st.To),
		r.entry(w, KindManagedNodegroup+"-handed-over", *st, "record "+model.NodegroupKey(w.Cluster, st.Name)))
}

// followNodegroup waits (capped exponential backoff, up to MaxWait in this invocation) until the agent's rollout
// record of the node group (model.NodegroupKey) is Completed (or Idle) on a release of the step's
// Kubernetes version and DescribeNodegroup shows the node group ACTIVE on that version and release: then the
// step is Completed. A rollout Halted, or RolledBack from a release of the step's version, halts the step with
// its reason (fix the rollout, then `--retry`). Its progress (phase, counts, release image, reason: the gate it
// waits for) is written on the step whenever it changes, which `eks upgrade --status` shows.
func (r *Runner) followNodegroup(ctx context.Context, w state.Workflow) (state.Workflow, error) {
	began := r.now()
	lastLine := began
	for attempt := 1; ; attempt++ {
		st := w.Steps[w.Current]
		key := model.NodegroupKey(w.Cluster, st.Name)
		ro, err := r.Store.GetRollout(ctx, key)
		found := err == nil
		if err != nil && !errors.Is(err, state.ErrNotFound) {
			return w, fmt.Errorf("reading the agent's rollout of managed node group %s: %w", key, err)
		}
		ng, exists, err := r.describeNodegroup(ctx, w.Cluster, st.Name)
		if err != nil {
			return w, err
		}
		if !exists {
			return r.halt(ctx, w, fmt.Sprintf("managed node group %s no longer exists (DescribeNodegroup): it cannot be on Kubernetes %s", st.Name, st.To))
		}
		p := &state.NodeProgress{}
		if found {
			v, ok := eks.VersionInParameter(ro.Source)
			p = &state.NodeProgress{Phase: ro.Phase, OnTarget: ro.OnTarget, Instances: ro.Instances, TargetImageID: ro.TargetImageID,
				Source: ro.Source, OnVersion: ok && v == st.To, Reason: ro.Reason}
		}
		targetRelease := ""
		if found && ro.Nodegroup != nil {
			targetRelease = ro.Nodegroup.TargetRelease
		}
		switch {
		case found && p.OnVersion && (ro.Phase == state.PhaseCompleted || ro.Phase == state.PhaseIdle) && ng.Version == st.To &&
			ng.Status == string(ekstypes.NodegroupStatusActive) && targetRelease != "" && ng.ReleaseVersion == targetRelease:
			cur := &w.Steps[w.Current]
			cur.Status, cur.CompletedAt, cur.Nodes = state.StepStatusCompleted, r.now(), p
			done := *cur
			w.Current++
			line := fmt.Sprintf("on Kubernetes %s, release %s; %s", ng.Version, ng.ReleaseVersion, NodesLine(p))
			return r.save(ctx, w, fmt.Sprintf("managed node group %s: %s", done.Name, line), r.entry(w, KindManagedNodegroup+"-completed", done, line))
		case found && (ro.Phase == state.PhaseHalted || ro.Phase == state.PhaseRolledBack && p.OnVersion && !operator.Rearmed(ro)):
			w.Steps[w.Current].Nodes = p
			return r.halt(ctx, w, fmt.Sprintf("the agent's rollout of %s is %s: %s; the node group is on Kubernetes %s, release %s, not on %s (%s)",
				key, ro.Phase, dashIfEmpty(ro.Reason), ng.Version, dashIfEmpty(ng.ReleaseVersion), st.To, retryHint(ro.Phase, key)))
		}
		if w, err = r.awaitRollout(ctx, w, p, "managed node group "+st.Name, fmt.Sprintf("Kubernetes %s", st.To), began, &lastLine, attempt); err != nil {
			return w, err
		}
	}
}
