package operator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// A manual rollback of an EKS managed node group. EKS replaces the nodes itself, so the rollback
// is not a new AMI for the agent to roll instance by instance: it is one more UpdateNodegroupVersion, back to
// the release (AMI types) or launch template version (CUSTOM) the node group ran before the rollout's target
// (Amazon EKS API Reference, UpdateNodegroupVersion: releaseVersion, launchTemplate). The operator's write
// records the update's ClientRequestToken and moves the record to RollingBack/NodegroupUpdate; the agent
// sends the update with that token at its next tick and follows it with DescribeUpdate, the same
// token-before-call rule as every node group update, so a crash never sends a second one.

// nodegroupRollbackPhases are the positions a node group's manual rollback may start from: Completed, and
// Halted in its update step (a failed update, or a failed rollback of one).
func nodegroupRollbackAllowed(r state.Rollout) bool {
	p := state.PositionOf(r)
	return p == state.Position{Phase: state.PhaseCompleted} ||
		p == state.Position{Phase: state.PhaseHalted, Step: state.StepNodegroupUpdate}
}

// nodegroupVersionLabel names a node group's release or launch template version as plans and history show it.
func nodegroupVersionLabel(p *state.NodegroupProgress, previous bool) string {
	if p.Custom() {
		v := p.TargetTemplateVersion
		if previous {
			v = p.PreviousTemplateVersion
		}
		lt := p.LaunchTemplateID
		if lt == "" {
			lt = p.LaunchTemplateName
		}
		return fmt.Sprintf("launch template %s version %s", lt, v)
	}
	if previous {
		return "release " + p.PreviousRelease
	}
	return "release " + p.TargetRelease
}

// planNodegroupRollback is planRollback for a managed node group's record: to and force do not apply (the
// rollback goes to the previous release or launch template version, never to an AMI id).
func planNodegroupRollback(r state.Rollout, to string, force bool) (RollbackPlan, error) {
	p := r.Nodegroup
	if to != "" || force {
		return RollbackPlan{}, fmt.Errorf("%s is an EKS managed node group: it rolls back to its previous %s, not to an AMI; drop --to and --force",
			r.Group, map[bool]string{true: "launch template version", false: "release"}[p.Custom()])
	}
	if !nodegroupRollbackAllowed(r) {
		return RollbackPlan{}, fmt.Errorf("the rollout of managed node group %s is at %s: a managed node group is rolled back from Completed or Halted/%s only",
			r.Group, state.PositionOf(r), state.StepNodegroupUpdate)
	}
	if p.UpdateStatus == "InProgress" {
		return RollbackPlan{}, fmt.Errorf("EKS update %s of managed node group %s/%s is still InProgress: wait for it to end (EKS refuses a second update meanwhile)",
			p.UpdateID, p.Cluster, p.Name)
	}
	if (p.Custom() && p.PreviousTemplateVersion == "") || (!p.Custom() && p.PreviousRelease == "") {
		return RollbackPlan{}, fmt.Errorf("no previous %s is recorded for managed node group %s: nothing to roll back to",
			map[bool]string{true: "launch template version", false: "release"}[p.Custom()], r.Group)
	}
	from, back := nodegroupVersionLabel(p, false), nodegroupVersionLabel(p, true)
	if from == back {
		return RollbackPlan{}, fmt.Errorf("managed node group %s already targets %s: nothing to roll back", r.Group, back)
	}
	plan := RollbackPlan{Group: r.Group, Platform: r.Platform, Phase: r.Phase, From: from, To: back, Instances: r.Instances, OnFrom: r.OnTarget,
		Nodegroup: &NodegroupRollbackPlan{Cluster: p.Cluster, Name: p.Name, MaxUnavailable: p.MaxUnavailable, MaxUnavailablePercentage: p.MaxUnavailablePercentage}}
	return plan, nil
}

// NodegroupRollbackPlan is the part of a RollbackPlan that names a managed node group: EKS replaces its nodes
// under its updateConfig (0 when unset: EKS's default of one node at a time).
type NodegroupRollbackPlan struct {
	Cluster, Name                            string
	MaxUnavailable, MaxUnavailablePercentage int32
}

// nodegroupRollbackToken is the ClientRequestToken of a manual rollback: another one for every request
// (now), so it never names the failed update EKS already ran under the rollout's own tokens.
func nodegroupRollbackToken(r state.Rollout, now time.Time) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s|manual-rollback|%s|%s", r.Group, nodegroupVersionLabel(r.Nodegroup, true), now.UTC().Format(time.RFC3339Nano))))
	return "patch-agent-" + hex.EncodeToString(h[:12])
}

// applyNodegroupRollback turns the record into the rollback update: RollingBack/NodegroupUpdate with a new
// ClientRequestToken, no update id yet (the agent sends it), RequestedBy who.
func applyNodegroupRollback(r *state.Rollout, who string, now time.Time) error {
	if r.Nodegroup == nil {
		return errors.New("not a managed node group record")
	}
	p := r.Nodegroup
	p.Rollback, p.UpdateToken, p.UpdateID, p.UpdateStatus, p.UpdateErrors = true, nodegroupRollbackToken(*r, now), "", "", nil
	p.RequestedBy = who
	counted, _ := r.ShownImages()
	r.Phase, r.Reason = state.PhaseRollingBack, ""
	r.Current = &state.Replacement{Step: state.StepNodegroupUpdate, StepStartedAt: now}
	if shown, _ := r.ShownImages(); shown != counted {
		// Status now shows (and the agent counts at its next tick) the AMI the rollback goes to: until then the
		// nodes not on the AMI rolled back from count as on it, as for an Auto Scaling group's rollback.
		r.OnTarget = max(r.Instances-r.OnTarget, 0)
	}
	r.Steps++
	r.UpdatedAt = now
	return nil
}
