package engine

import (
	"context"
	"fmt"
	"strings"

	"github.com/patch-agent/patch-agent/internal/state"
)

// olderEngine takes over an active rollout record that an older agent wrote while it replaced instances by
// raising the group's desired capacity itself (strategy surge, drain-first or capacity-provider, or none
// recorded): this agent never writes desired capacity and does not know how much of it was that agent's.
//
//   - Preparing: nothing was replaced yet; the rollout goes back to Detected and starts again by instance
//     refresh, through the gates (the launch template version found again, not created twice).
//   - Replacing, Verifying or RollingBack: the rollout halts without rollback. Its reason names what the older
//     agent may have left: desired capacity and MaxSize raised by one instance per replacement in flight, an
//     old instance DRAINING (ECS) or cordoned (EKS), an instance protected from scale-in. The operator checks
//     them against what the group's other writers set, lowers what is left over, and runs `patch-agent retry`
//     (or `rollback`), which rolls the group by instance refresh.
func (o *Orchestrator) olderEngine(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	strategy := r.Strategy
	if strategy == "" {
		strategy = "surge"
	}
	if r.Phase == state.PhasePreparing {
		r.Phase, r.Strategy, r.Current = state.PhaseDetected, "", nil
		return o.save(ctx, r, fmt.Sprintf("a rollout an older agent prepared (%s strategy) starts again by instance refresh", strategy))
	}
	r.Strategy = strategy // the halted record stays recognisable as an older agent's (state.Rollout.ByOlderEngine)
	return o.halt(ctx, r, OlderEngineReason(r.Group, strategy, r.Current), false)
}

// olderEngineHalted returns r, a Halted record, with the reason of OlderEngineReason when an older agent halted
// it (state.Rollout.ByOlderEngine) with a reason of its own: the older agent's words ("drain deadline ...")
// say nothing about the desired capacity and MaxSize it may have left raised. Its own reason is kept after
// OlderEngineReason's. The caller writes the record when the reason changed (once).
func olderEngineHalted(r state.Rollout) state.Rollout {
	if !r.ByOlderEngine() || strings.Contains(r.Reason, olderEngineMark) {
		return r
	}
	strategy := r.Strategy
	if strategy == "" {
		strategy = "surge"
	}
	own := strings.TrimPrefix(r.Reason, "failed: ")
	r.Reason = "failed: " + OlderEngineReason(r.Group, strategy, r.Current)
	if own != "" {
		r.Reason += " (the older agent's own reason: " + own + ")"
	}
	return r
}

// olderEngineMark is in every OlderEngineReason.
const olderEngineMark = "an older patch-agent left this rollout mid-replacement"

// OlderEngineReason is the halt reason of a rollout an older agent left mid-replacement (olderEngine): what to
// check and lower, and the command that goes on. cur is the replacement it left in flight (nil between two).
func OlderEngineReason(group, strategy string, cur *state.Replacement) string {
	at := ""
	if cur != nil && cur.OldInstanceID != "" {
		at = fmt.Sprintf(" (step %s, replacing %s)", cur.Step, cur.OldInstanceID)
	}
	return fmt.Sprintf("an older patch-agent left this rollout mid-replacement%s by its %s strategy, which wrote "+
		"desired capacity; this agent never does. Check the group: desired capacity and MaxSize may still hold that "+
		"agent's extra instance (one per replacement in flight): lower them to what your autoscaler and "+
		"infrastructure as code set; an old instance may still be DRAINING (ECS) or cordoned (EKS): put it back in "+
		"service if it still runs. Then `patch-agent retry %s` rolls the group by instance refresh", at, strategy, group)
}
