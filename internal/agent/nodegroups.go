package agent

import (
	"context"
	"errors"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// reconcileNodegroups discovers the opted-in EKS managed node groups (providers.NodegroupClient.Discover)
// and advances each one's rollout (engine.Orchestrator.ReconcileNodegroup) with the same records, pause
// locks, backoff and observer as the groups. Without Clients.EKSNodegroups it does nothing. A failed discovery
// is logged and skips the node groups this tick; the groups are not held by it.
func (a *Agent) reconcileNodegroups(ctx context.Context, locks []state.Lock, records map[string]state.Rollout, only map[string]bool) {
	if a.clients.EKSNodegroups == nil {
		return
	}
	reader := a.nodegroupReader()
	d, err := reader.Client.Discover(ctx)
	if err != nil {
		a.log.Warn("discovering EKS managed node groups failed; retrying next tick", zap.Error(err))
		return
	}
	for key, err := range d.Misconfigured {
		a.log.Warn("opted-in managed node group skipped", zap.String(logging.Group, key), zap.Error(err))
	}
	for _, key := range d.Names() {
		if (only != nil && !only[key]) || !a.retries.Due(key) {
			continue
		}
		t, ng := d.Targets[key], d.Nodegroups[key]
		rec, known := records[key]
		if !known {
			rec = state.Rollout{Group: key, Platform: t.Platform, Cluster: t.Cluster}
		}
		in, err := reader.Inputs(ctx, t, ng, pauseFor(locks, key, a.clock.Now()), a.clock.Now())
		if err != nil {
			a.stepFailed(key, rec, "reading managed node group failed", err)
			continue
		}
		in.Record = &rec
		r, err := a.rollouts().ReconcileNodegroup(ctx, t, in)
		if err != nil {
			if r.Group == "" {
				r = rec
			}
			a.stepFailed(key, r, "managed node group rollout step failed", err)
		} else {
			a.retries.Succeeded(key)
		}
		if r.Group != "" {
			records[key] = r
		}
		a.settings.Observer.TargetObserved(t, in.View, r, in.AMI)
	}
}

// nodegroupReader reads managed node groups through the agent's clients.
func (a *Agent) nodegroupReader() providers.NodegroupReader {
	client := providers.NodegroupClient{EKS: a.clients.EKSNodegroups, SSM: a.clients.SSM}
	return providers.NodegroupReader{Client: client, AutoScaling: a.clients.AutoScaling, EC2: a.clients.EC2,
		Templates: a.orchestrator.Templates, Resolver: a.resolver}
}

// recordNotRolled puts on status (model.Inputs.NotRolled) why each opted-in Auto Scaling group that
// discovery left out (d.Misconfigured) is not rolled: a tag with a value the agent does not accept, an AMI
// source it cannot use, or the group of an EKS managed node group (model.ErrManagedNodegroupGroup), whose
// nodes EKS drains and replaces. Only its record is written; the group itself is never touched. A group without
// a record gets one at Halted with the reason, which the orchestrator lifts once the group is a target again.
func (a *Agent) recordNotRolled(ctx context.Context, d providers.Discovered, records map[string]state.Rollout, only map[string]bool) {
	for group, why := range d.Misconfigured {
		if only != nil && !only[group] {
			continue
		}
		rec, known := records[group]
		if !known {
			rec = state.Rollout{Group: group}
			if t, ok := d.Drainable[group]; ok {
				rec.Platform, rec.Cluster = t.Platform, t.Cluster
			} else if errors.Is(why, model.ErrManagedNodegroupGroup) {
				rec.Platform = model.PlatformEKS
			}
		}
		r, err := a.rollouts().Reconcile(ctx, model.Target{Group: group, Platform: rec.Platform, Cluster: rec.Cluster},
			model.Inputs{Record: &rec, NotRolled: why})
		if err != nil {
			a.log.Warn("recording why a group is not rolled failed; retrying next tick", zap.String(logging.Group, group), zap.Error(err))
			continue
		}
		records[group] = r
	}
}
