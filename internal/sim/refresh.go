package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
)

// Instance refresh, modelled from the Amazon EC2 Auto Scaling User Guide ("Use an instance refresh to update
// instances in an Auto Scaling group" and its sub-pages) and API Reference (StartInstanceRefresh,
// RefreshPreferences, DesiredConfiguration, InstanceRefresh, DescribeInstanceRefreshes, CancelInstanceRefresh,
// RollbackInstanceRefresh). No emulator on these machines serves these operations (moto 5.2.1 has no handler
// for them), so this model is the reference the agent is tested against; docs/simulation.md lists each
// behaviour and what the documentation leaves open.
//
// The refresh is driven by the account's control loop (settle) and its timed events: it decides which old
// instances to terminate and how many instances the group may run above its desired capacity (surge), and
// reconcileGroup does the launching, so launches and terminations go through the same lifecycle hook machinery
// (Pending:Wait, Terminating:Wait) as every other launch and termination of the group.

// CauseRefresh is the Termination.Cause of an instance an instance refresh (or its rollback) replaced.
const CauseRefresh = "refresh"

// refreshPendingDelay is how long a new refresh stays Pending before it starts replacing. API Reference,
// InstanceRefresh: Status Pending means the request was created but the refresh has not started; the delay
// is the model's, short and fixed so that tests can observe the state.
const refreshPendingDelay = 10 * time.Second

// refreshWaitLimit is how long a refresh waits for scale-in protection to be removed or Standby instances to
// return to service, and how long it keeps retrying replacements that do not become healthy, before it fails.
// API Reference, RefreshPreferences: ScaleInProtectedInstances and StandbyInstances, "Wait" waits one hour.
const refreshWaitLimit = time.Hour

// refreshAlarmPoll is how often an active refresh with an AlarmSpecification looks at its alarms when nothing
// else happens in the group (CloudWatch evaluates alarms once a period; one minute is the shortest standard one).
const refreshAlarmPoll = time.Minute

// maxRefreshAlarms is AlarmSpecification's limit. API Reference, AlarmSpecification: up to 10 alarms.
const maxRefreshAlarms = 10

// defaultCheckpointDelay applies when CheckpointPercentages are given without CheckpointDelay. API Reference,
// RefreshPreferences: CheckpointDelay defaults to 3600 seconds.
const defaultCheckpointDelay = time.Hour

type instanceRefresh struct {
	id, group    string
	status       astypes.InstanceRefreshStatus
	reason       string
	start, end   time.Time
	prefs        astypes.RefreshPreferences // as given, for DescribeInstanceRefreshes
	desiredInput *astypes.DesiredConfiguration

	// resolved preferences
	minPct, maxPct  int
	maxSet          bool
	warmup          time.Duration
	checkpoints     []int
	checkpointDelay time.Duration
	skipMatching    bool
	protectedMode   astypes.ScaleInProtectedInstances
	standbyMode     astypes.StandbyInstances
	alarms          []string
	autoRollback    bool
	bake            time.Duration

	// target is the configuration instances are replaced onto; prev is the group's configuration at the start,
	// which a rollback returns to and the group keeps unless the refresh succeeds.
	target, prev refreshConfig
	hasDesired   bool

	// the current phase (the refresh, or its rollback)
	phaseStart  time.Time
	toReplace   []string // old instances, in the order they are replaced
	total       int
	launched    map[string]bool      // instances launched on the target during the phase
	inServiceAt map[string]time.Time // when each of them was first seen InService
	failed      map[string]bool      // launched instances that left before becoming ready
	readySeen   map[string]bool      // launched instances seen ready
	failedSince time.Time            // first replacement that failed since the last one became ready
	waitSince   time.Time            // waiting for protected or Standby instances since
	holdUntil   time.Time            // checkpoint delay or bake time
	nextCheck   int                  // index of the next checkpoint
	stopAtHold  bool                 // the last checkpoint is below 100: the refresh ends after it
	surge       int                  // instances the group may run above its desired capacity now
	done        int                  // instances updated (healthy and warmed up) in this phase
	frozenToUpd int                  // InstancesToUpdate of the refresh when its rollback began

	rollback *refreshRollback
}

type refreshRollback struct {
	reason string
	start  time.Time
}

// refreshConfig is a launch template reference: id, the version as written ("3", "$Latest", "$Default") and
// whether it sits in a mixed instances policy.
type refreshConfig struct {
	ltID, ltVersion string
	mixed           bool
}

func (c refreshConfig) explicit() bool { return c.ltVersion != "$Latest" && c.ltVersion != "$Default" }

// active reports whether a refresh still holds its group. API Reference, StartInstanceRefresh
// (InstanceRefreshInProgress) and CancelInstanceRefresh (ActiveInstanceRefreshNotFound): a refresh that is
// pending, in progress, baking, cancelling or rolling back is active.
func (r *instanceRefresh) active() bool {
	switch r.status {
	case astypes.InstanceRefreshStatusPending, astypes.InstanceRefreshStatusInProgress, astypes.InstanceRefreshStatusBaking,
		astypes.InstanceRefreshStatusCancelling, astypes.InstanceRefreshStatusRollbackInProgress:
		return true
	}
	return false
}

// rollbackAllowed reports whether RollbackInstanceRefresh may act on the refresh's current status: a refresh
// still replacing or baking. User Guide, "Undo changes with a manual or auto rollback": a refresh can be rolled
// back while it is in progress (its bake time included), not after it completed, failed or was cancelled.
func (r *instanceRefresh) rollbackAllowed() bool {
	switch r.status {
	case astypes.InstanceRefreshStatusPending, astypes.InstanceRefreshStatusInProgress, astypes.InstanceRefreshStatusBaking:
		return true
	}
	return false
}

// activeRefresh returns the group's active refresh, nil when there is none.
func (as *autoScalingService) activeRefresh(g *group) *instanceRefresh {
	if n := len(g.refreshes); n > 0 && g.refreshes[n-1].active() {
		return g.refreshes[n-1]
	}
	return nil
}

// refreshLaunchConfig is what the group launches from while a refresh with a desired configuration replaces:
// API Reference, StartInstanceRefresh (DesiredConfiguration): replacements and scale outs during the refresh
// launch instances with the desired configuration. A
// rollback launches from the previous configuration, which is the group's own. ok is false when the group's
// own reference applies.
func (as *autoScalingService) refreshLaunchConfig(g *group) (refreshConfig, bool) {
	r := as.activeRefresh(g)
	if r == nil || !r.hasDesired || r.rollback != nil || r.status == astypes.InstanceRefreshStatusCancelling {
		return refreshConfig{}, false
	}
	return r.target, true
}

// refreshSkipsPoolInstance reports whether a refresh keeps a warm pool instance from being drawn into service:
// while a refresh replaces, a pool instance not on the refresh's configuration would be a replacement that needs
// replacing again, so the group launches a new instance instead (conservative; the User Guide's warm pool
// pages do not say which the refresh does).
func (as *autoScalingService) refreshSkipsPoolInstance(g *group, inst *instance) bool {
	r := as.activeRefresh(g)
	if r == nil || r.status == astypes.InstanceRefreshStatusCancelling || r.status == astypes.InstanceRefreshStatusPending ||
		as.opts.RefreshDrawsOutdatedPoolInstances {
		return false
	}
	return !as.matches(inst, r.target)
}

// refreshSurge is how many instances the group may run above its desired capacity for its refresh.
func (as *autoScalingService) refreshSurge(g *group) int {
	if r := as.activeRefresh(g); r != nil {
		return r.surge
	}
	return 0
}

// resolvedVersion resolves a configuration to its template version number now (0 when it does not resolve).
func (as *autoScalingService) resolvedVersion(c refreshConfig) int64 {
	t := as.ec2.template(c.ltID)
	if t == nil {
		return 0
	}
	v, ok := t.resolve(c.ltVersion)
	if !ok {
		return 0
	}
	return v.number
}

// matches reports whether an instance runs the configuration: the same template and version.
func (as *autoScalingService) matches(inst *instance, c refreshConfig) bool {
	return inst.ltID == c.ltID && inst.ltVersion == as.resolvedVersion(c)
}

// StartInstanceRefresh starts an instance refresh of a group. Errors: ValidationError (unknown group, invalid
// preferences, alarms, rollback prerequisites with AutoRollback, a desired configuration on an attribute-based
// group), InstanceRefreshInProgress (the group has an active refresh).
// Amazon EC2 Auto Scaling API Reference, StartInstanceRefresh and RefreshPreferences.
func (c *AutoScalingClient) StartInstanceRefresh(ctx context.Context, in *autoscaling.StartInstanceRefreshInput, _ ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:StartInstanceRefresh")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	// API Reference, StartInstanceRefresh: InstanceRefreshInProgress when the group already has an active refresh.
	if r := as.activeRefresh(g); r != nil {
		msg := fmt.Sprintf("An Instance Refresh is already in progress and blocks the execution of this Instance Refresh (%s).", r.id)
		return nil, &astypes.InstanceRefreshInProgressFault{Message: &msg}
	}
	if in.Strategy != "" && in.Strategy != astypes.RefreshStrategyRolling {
		return nil, apiError("ValidationError", "Strategy %s is not modelled by the simulation; use Rolling.", in.Strategy)
	}
	r := &instanceRefresh{id: as.uuid(), group: g.name, status: astypes.InstanceRefreshStatusPending, start: as.now(),
		prev: refreshConfig{ltID: g.ltID, ltVersion: g.ltVersion, mixed: g.mixed}}
	if in.Preferences != nil {
		r.prefs = *in.Preferences
	}
	if err := as.resolvePreferences(g, r); err != nil {
		return nil, err
	}
	r.target = r.prev
	if d := in.DesiredConfiguration; d != nil {
		// User Guide, instance refresh limitations: a desired configuration is not taken for a group that
		// selects instance types by attributes (InstanceRequirements); the model refuses it at the start.
		if g.instanceRequirements {
			return nil, apiError("ValidationError", "A desired configuration is not supported for an Auto Scaling group that uses attribute-based instance type selection (InstanceRequirements).")
		}
		var spec *astypes.LaunchTemplateSpecification
		mixed := false
		switch {
		case d.LaunchTemplate != nil && d.MixedInstancesPolicy != nil:
			return nil, apiError("ValidationError", "Valid requests must contain either LaunchTemplate or MixedInstancesPolicy in the DesiredConfiguration.")
		case d.LaunchTemplate != nil:
			spec = d.LaunchTemplate
		case d.MixedInstancesPolicy != nil && d.MixedInstancesPolicy.LaunchTemplate != nil:
			spec, mixed = d.MixedInstancesPolicy.LaunchTemplate.LaunchTemplateSpecification, true
		}
		if spec != nil {
			id, v, err := as.templateRef(spec)
			if err != nil {
				return nil, fmt.Errorf("desired configuration: %w", err)
			}
			r.target = refreshConfig{ltID: id, ltVersion: v, mixed: mixed}
			r.hasDesired = true
			r.desiredInput = d
		}
	}
	// API Reference, RefreshPreferences: AutoRollback is not supported without a desired configuration, with a
	// launch template whose ImageId is a Systems Manager parameter, or with $Latest or $Default.
	if r.autoRollback {
		if err := as.rollbackPrerequisites(r); err != nil {
			return nil, apiError("ValidationError", "AutoRollback: %s", err.Error())
		}
	}
	g.refreshes = append(g.refreshes, r)
	as.after(refreshPendingDelay, func() { as.beginRefresh(g, r) })
	return &autoscaling.StartInstanceRefreshOutput{InstanceRefreshId: ptr(r.id)}, nil
}

// resolvePreferences validates the request's preferences and fills in their defaults.
// API Reference, RefreshPreferences; User Guide, "Understand the default values for an instance refresh".
func (as *autoScalingService) resolvePreferences(g *group, r *instanceRefresh) error {
	p := r.prefs
	// MinHealthyPercentage: 0 to 100, default 90. MaxHealthyPercentage: 100 to 200, default 100; given, it needs
	// MinHealthyPercentage, and the two may be at most 100 apart.
	r.minPct, r.maxPct = 90, 100
	if p.MinHealthyPercentage != nil {
		r.minPct = int(*p.MinHealthyPercentage)
		if r.minPct < 0 || r.minPct > 100 {
			return apiError("ValidationError", "MinHealthyPercentage must be between 0 and 100, got %d.", r.minPct)
		}
	}
	if p.MaxHealthyPercentage != nil {
		if p.MinHealthyPercentage == nil {
			return apiError("ValidationError", "MinHealthyPercentage must be specified when MaxHealthyPercentage is specified.")
		}
		r.maxPct, r.maxSet = int(*p.MaxHealthyPercentage), true
		if r.maxPct < 100 || r.maxPct > 200 {
			return apiError("ValidationError", "MaxHealthyPercentage must be between 100 and 200, got %d.", r.maxPct)
		}
		if r.maxPct-r.minPct > 100 {
			return apiError("ValidationError", "The difference between MaxHealthyPercentage (%d) and MinHealthyPercentage (%d) cannot be greater than 100.", r.maxPct, r.minPct)
		}
	}
	// InstanceWarmup: default the group's DefaultInstanceWarmup, else its HealthCheckGracePeriod.
	switch {
	case p.InstanceWarmup != nil:
		r.warmup = time.Duration(*p.InstanceWarmup) * time.Second
	case g.defaultWarmup != nil:
		r.warmup = *g.defaultWarmup
	default:
		r.warmup = g.healthCheckGrace
	}
	// CheckpointPercentages ascending and unique, 1 to 100; CheckpointDelay needs them and defaults to an hour.
	if p.CheckpointDelay != nil && len(p.CheckpointPercentages) == 0 {
		return apiError("ValidationError", "CheckpointDelay requires CheckpointPercentages.")
	}
	for i, c := range p.CheckpointPercentages {
		if c < 1 || c > 100 || (i > 0 && c <= p.CheckpointPercentages[i-1]) {
			return apiError("ValidationError", "CheckpointPercentages must be unique values between 1 and 100 in ascending order.")
		}
		r.checkpoints = append(r.checkpoints, int(c))
	}
	r.checkpointDelay = defaultCheckpointDelay
	if p.CheckpointDelay != nil {
		r.checkpointDelay = time.Duration(*p.CheckpointDelay) * time.Second
	}
	r.skipMatching = p.SkipMatching != nil && *p.SkipMatching
	// ScaleInProtectedInstances and StandbyInstances default to Wait (User Guide, "Understand the default values
	// for an instance refresh": AWS CLI or SDK column).
	r.protectedMode = p.ScaleInProtectedInstances
	if r.protectedMode == "" {
		r.protectedMode = astypes.ScaleInProtectedInstancesWait
	}
	r.standbyMode = p.StandbyInstances
	if r.standbyMode == "" {
		r.standbyMode = astypes.StandbyInstancesWait
	}
	if p.AlarmSpecification != nil {
		r.alarms = append([]string(nil), p.AlarmSpecification.Alarms...)
		if len(r.alarms) > maxRefreshAlarms {
			return apiError("ValidationError", "AlarmSpecification: at most %d alarms, got %d.", maxRefreshAlarms, len(r.alarms))
		}
		// An alarm the refresh cannot read is refused at the start: one that does not exist, and one in
		// INSUFFICIENT_DATA, which gives the refresh no signal to judge the replacements by.
		for _, name := range r.alarms {
			st, ok := as.cloudWatch.alarm(name)
			if !ok {
				return apiError("ValidationError", "AlarmSpecification: alarm %s does not exist.", name)
			}
			if st == "INSUFFICIENT_DATA" {
				return apiError("ValidationError", "AlarmSpecification: alarm %s is in INSUFFICIENT_DATA state.", name)
			}
		}
	}
	r.autoRollback = p.AutoRollback != nil && *p.AutoRollback
	if p.BakeTime != nil {
		r.bake = time.Duration(*p.BakeTime) * time.Second
	}
	return nil
}

// rollbackPrerequisites checks what a rollback needs. API Reference, RollbackInstanceRefresh and
// RefreshPreferences (AutoRollback): a desired configuration, a launch template whose ImageId is an AMI id
// (not a Systems Manager parameter), and an explicit version, not $Latest or $Default.
func (as *autoScalingService) rollbackPrerequisites(r *instanceRefresh) error {
	if !r.hasDesired {
		return fmt.Errorf("the instance refresh has no desired configuration")
	}
	for _, c := range []refreshConfig{r.prev, r.target} {
		if !c.explicit() {
			return fmt.Errorf("launch template %s uses version %s; a rollback needs an explicit version", c.ltID, c.ltVersion)
		}
		if t := as.ec2.template(c.ltID); t != nil {
			if v, ok := t.resolve(c.ltVersion); ok && strings.HasPrefix(v.imageID, "resolve:ssm:") {
				return fmt.Errorf("launch template %s version %s takes its ImageId from a Systems Manager parameter", c.ltID, c.ltVersion)
			}
		}
	}
	return nil
}

// beginRefresh moves a Pending refresh to InProgress and fixes the instances it replaces.
// API Reference, RefreshPreferences: SkipMatching leaves out instances already on the desired configuration
// (without one, on the group's configuration at the start); Ignore leaves out protected or Standby instances.
func (as *autoScalingService) beginRefresh(g *group, r *instanceRefresh) {
	if r.status != astypes.InstanceRefreshStatusPending {
		return
	}
	r.status = astypes.InstanceRefreshStatusInProgress
	var old []string
	for _, id := range g.instances {
		inst := as.ec2.instance(id)
		if !countsTowardCapacity(inst.state) && inst.state != string(astypes.LifecycleStateStandby) {
			continue
		}
		if r.skipMatching && as.matches(inst, r.target) {
			continue
		}
		standby := inst.state == string(astypes.LifecycleStateStandby)
		if (standby && r.standbyMode == astypes.StandbyInstancesIgnore) || (!standby && inst.protected && r.protectedMode == astypes.ScaleInProtectedInstancesIgnore) {
			continue
		}
		old = append(old, id)
	}
	as.startPhase(r, old)
	as.pollAlarms(g, r)
}

// startPhase starts replacing the given instances (the refresh's, or its rollback's).
func (as *autoScalingService) startPhase(r *instanceRefresh, old []string) {
	r.phaseStart = as.now()
	r.toReplace = old
	r.total = len(old)
	r.launched, r.inServiceAt, r.failed, r.readySeen = map[string]bool{}, map[string]time.Time{}, map[string]bool{}, map[string]bool{}
	r.failedSince, r.waitSince, r.holdUntil = time.Time{}, time.Time{}, time.Time{}
	r.nextCheck, r.stopAtHold, r.surge, r.done = 0, false, 0, 0
}

// pollAlarms keeps a timed event while the refresh watches alarms, so that an alarm going into ALARM is seen
// even when nothing else happens in the group.
func (as *autoScalingService) pollAlarms(g *group, r *instanceRefresh) {
	if len(r.alarms) == 0 {
		return
	}
	as.after(refreshAlarmPoll, func() {
		if r.active() && r.rollback == nil {
			as.pollAlarms(g, r)
		}
	})
}

// reconcileRefreshes advances every active refresh. Callers hold the lock.
func (as *autoScalingService) reconcileRefreshes() bool {
	changed := false
	for _, name := range as.groupNames() {
		g := as.groups[name]
		if r := as.activeRefresh(g); r != nil && as.stepRefresh(g, r) {
			changed = true
		}
	}
	return changed
}

// ready reports whether an instance counts as healthy and ready for MinHealthyPercentage: InService and
// healthy, and, for an instance the refresh launched, past its warm-up. API Reference, InstanceRefresh
// (PercentageComplete): a replacement is updated once it is healthy and its warm-up time has passed;
// RefreshPreferences (InstanceWarmup): the warm-up starts when the new instance enters InService, that is
// after its launching lifecycle hooks completed.
func (as *autoScalingService) ready(r *instanceRefresh, inst *instance) bool {
	if inst.state != string(astypes.LifecycleStateInService) || inst.unhealthy {
		return false
	}
	if !r.launched[inst.id] {
		return true
	}
	at, ok := r.inServiceAt[inst.id]
	return ok && !as.now().Before(at.Add(r.warmup))
}

func (as *autoScalingService) setReason(r *instanceRefresh, format string, args ...any) bool {
	s := fmt.Sprintf(format, args...)
	if r.reason == s {
		return false
	}
	r.reason = s
	return true
}

// stepRefresh advances one refresh by what its group's state allows now. It reports whether it changed
// anything the control loop must react to. Callers hold the lock.
func (as *autoScalingService) stepRefresh(g *group, r *instanceRefresh) bool {
	now := as.now()
	if r.status == astypes.InstanceRefreshStatusPending {
		return false
	}
	as.observeLaunches(g, r)

	// API Reference, RefreshPreferences (AlarmSpecification) and User Guide, "Use CloudWatch alarms with an
	// instance refresh": an alarm going into ALARM fails the refresh (and rolls it back with AutoRollback).
	if r.rollback == nil && r.status != astypes.InstanceRefreshStatusCancelling {
		for _, name := range r.alarms {
			if st, _ := as.cloudWatch.alarm(name); st == "ALARM" {
				return as.failRefresh(g, r, fmt.Sprintf("Instance refresh failed: alarm %s is in ALARM state.", name))
			}
		}
	}

	running := as.running(g)
	desired := int(g.desired)
	var inflightLaunch, inflightTerm int
	for _, inst := range running {
		if r.launched[inst.id] && inst.state != string(astypes.LifecycleStateInService) {
			inflightLaunch++
		}
	}
	var regular, waiting, standbyTerm []*instance
	var remainingOld int
	for _, id := range r.toReplace {
		inst := as.ec2.instance(id)
		switch {
		case isTerminating(inst.state):
			if inst.state != string(astypes.LifecycleStateTerminatingProceed) {
				inflightTerm++
			}
			continue
		case inst.state == string(astypes.LifecycleStateTerminated) || as.inWarmPool(inst):
			continue
		}
		standby := inst.state == string(astypes.LifecycleStateStandby)
		if !standby && !countsTowardCapacity(inst.state) {
			continue
		}
		// API Reference, RefreshPreferences: ScaleInProtectedInstances and StandbyInstances (Ignore leaves the
		// instance as it is, Wait waits an hour for it, Refresh/Terminate replaces it).
		switch {
		case standby && r.standbyMode == astypes.StandbyInstancesIgnore,
			!standby && inst.protected && r.protectedMode == astypes.ScaleInProtectedInstancesIgnore:
			continue
		case standby && r.standbyMode == astypes.StandbyInstancesWait,
			!standby && inst.protected && r.protectedMode == astypes.ScaleInProtectedInstancesWait:
			waiting = append(waiting, inst)
		case standby:
			standbyTerm = append(standbyTerm, inst)
		default:
			regular = append(regular, inst)
		}
		remainingOld++
	}
	readyNew := 0
	for id := range r.launched {
		if inst := as.ec2.instance(id); as.ready(r, inst) {
			readyNew++
		}
	}
	r.done = min(r.total-remainingOld, readyNew, r.total)
	if r.done < 0 {
		r.done = 0
	}

	// API Reference, CancelInstanceRefresh: the cancellation waits for launches and terminations in flight
	// (WaitForTransitioningInstances, default true), then the refresh is Cancelled; nothing is rolled back.
	if r.status == astypes.InstanceRefreshStatusCancelling {
		r.surge = max(0, min(r.surge, len(running)-desired))
		if inflightLaunch > 0 || inflightTerm > 0 {
			return as.setReason(r, "Waiting for %d launches and %d terminations in progress before cancelling.", inflightLaunch, inflightTerm)
		}
		r.status, r.end, r.surge = astypes.InstanceRefreshStatusCancelled, now, 0
		as.setReason(r, "Instance refresh cancelled.")
		return true
	}

	// API Reference, StartInstanceRefresh: launch failures and replacements that never pass their health checks
	// fail a refresh. The model retries them for an hour, as long as the Wait preferences wait, counted from the
	// first failed replacement since the last healthy one (docs/simulation.md).
	if !r.failedSince.IsZero() && !now.Before(r.failedSince.Add(refreshWaitLimit)) {
		return as.failRefresh(g, r, "Instance refresh failed: replacement instances did not become healthy within 1 hour.")
	}

	if r.status == astypes.InstanceRefreshStatusBaking {
		if now.Before(r.holdUntil) {
			return false
		}
		return as.completeRefresh(g, r)
	}

	// CheckpointPercentages + CheckpointDelay: User Guide, "Add checkpoints to an instance refresh": at each
	// checkpoint the refresh pauses for the delay; a last checkpoint below 100 ends the refresh there.
	if now.Before(r.holdUntil) {
		r.surge = max(0, min(r.surge, len(running)-desired))
		return false
	}
	if r.stopAtHold {
		return as.finishReplacing(g, r)
	}
	pct := 100
	if r.total > 0 {
		pct = r.done * 100 / r.total
	}
	if r.checkpointReached(pct) {
		// No new replacement starts once a checkpoint is reached; the hold begins when those in flight end.
		r.surge = max(0, min(r.surge, len(running)-desired))
		if inflightLaunch > 0 || inflightTerm > 0 {
			return as.setReason(r, "Reaching checkpoint %d%%: waiting for the replacements in progress.", r.checkpoints[r.nextCheck])
		}
		cp := r.checkpoints[r.nextCheck]
		r.nextCheck++
		r.holdUntil = now.Add(r.checkpointDelay)
		r.stopAtHold = r.nextCheck == len(r.checkpoints) && cp < 100
		r.surge = max(0, min(r.surge, len(running)-desired))
		as.setReason(r, "Waiting at checkpoint %d%% for %s.", cp, r.checkpointDelay)
		as.after(r.checkpointDelay, func() {})
		return true
	}

	// Standby instances with Terminate are terminated; they do not count toward the desired capacity, so no
	// healthy bound applies to them.
	changed := false
	for _, inst := range standbyTerm {
		as.beginTerminate(inst, CauseRefresh)
		changed = true
	}

	if len(regular) == 0 {
		r.surge = max(0, min(r.surge, len(running)-desired))
		if inflightLaunch > 0 || inflightTerm > 0 || !as.allLaunchedReady(r) {
			as.setReason(r, "Replacing instances: %d of %d updated.", r.done, r.total) // as PercentageComplete says
			return changed
		}
		if len(waiting) > 0 {
			if r.waitSince.IsZero() {
				r.waitSince = now
				as.after(refreshWaitLimit, func() {})
			}
			if !now.Before(r.waitSince.Add(refreshWaitLimit)) {
				return as.failRefresh(g, r, fmt.Sprintf("Instance refresh failed: %s did not become replaceable within 1 hour.", waiting[0].id))
			}
			what := "is protected from scale in"
			if waiting[0].state == string(astypes.LifecycleStateStandby) {
				what = "is in Standby"
			}
			return as.setReason(r, "Waiting for instance %s, which %s (waits up to 1 hour).", waiting[0].id, what) || changed
		}
		return as.finishReplacing(g, r) || changed
	}
	r.waitSince = time.Time{}

	// MinHealthyPercentage and MaxHealthyPercentage: API Reference, RefreshPreferences. The group keeps at least
	// MinHealthy% of its desired capacity InService, healthy and warmed up, and runs at most MaxHealthy% of it
	// (in service or pending). The model rounds the lower bound up and the upper bound down, so that it never
	// breaks either by rounding.
	minCount := int(math.Ceil(float64(desired) * float64(r.minPct) / 100))
	maxCount := desired * r.maxPct / 100
	if minCount >= desired && maxCount <= desired {
		if r.maxSet {
			// MaxHealthyPercentage given and both bounds cannot be honoured: one instance is launched before one
			// is terminated, above the desired capacity for a while.
			maxCount = desired + 1
		} else {
			// MaxHealthyPercentage omitted: an instance is terminated and its replacement launched at once.
			minCount = desired - 1
		}
	}
	// The model never takes the group above its MaxSize for a refresh: the documentation does not say that a
	// refresh may exceed it (docs/simulation.md).
	maxCount = min(maxCount, int(g.max))
	if as.opts.RefreshTerminatesFirst {
		minCount, maxCount = desired-1, desired // the deliberately broken model of Options.RefreshTerminatesFirst
	}
	r.surge = max(0, min(maxCount-desired, len(regular)))

	healthy := 0
	for _, inst := range running {
		if as.ready(r, inst) {
			healthy++
		}
	}
	// Terminate old instances while the healthy ones left stay at or above the lower bound; reconcileGroup
	// launches their replacements (and the surge) from the refresh's configuration.
	//
	// A scale in that is due (another writer lowered desired capacity) takes its instances in the same pass
	// (reconcileGroup, after this step), and it may take healthy ones: the model counts them as gone before it
	// terminates, so that a replacement never meets a scale in below the lower bound (conservative; the
	// documentation does not say how the two are ordered).
	regular = zoneBalancedOrder(running, regular)
	terminated, readyGone := 0, 0
	for _, inst := range regular {
		gone := readyGone
		if as.ready(r, inst) {
			gone++
		}
		after := len(running) - terminated - 1
		surgeAfter := max(0, min(maxCount-desired, len(regular)-terminated-1))
		scaleIn := max(0, after-desired-surgeAfter)
		if healthy-gone-scaleIn < minCount {
			break
		}
		readyGone = gone
		as.beginTerminate(inst, CauseRefresh)
		terminated++
		changed = true
	}
	// The surge covers only the old instances still to be terminated, and none is launched past a checkpoint
	// the terminations just reached.
	r.surge = max(0, min(maxCount-desired, len(regular)-terminated))
	if r.total > 0 && r.checkpointReached(min(r.total-(remainingOld-terminated), readyNew)*100/r.total) {
		r.surge = max(0, min(r.surge, len(running)-terminated-desired))
	}
	// A ceiling lowered by another writer's scale in (MaxHealthyPercentage is a percentage of the desired
	// capacity) stops new launches; the replacements already launching are not scaled in to meet it. The
	// documentation gives the bound as what the refresh keeps in service or pending while it replaces, not as a
	// reason to terminate; the model keeps them (docs/simulation.md).
	r.surge = max(r.surge, min(inflightLaunch, len(running)-terminated-desired))
	if !changed && r.surge == 0 && minCount >= desired {
		return as.setReason(r, "Waiting: launching before terminating needs room above the desired capacity (%d), and the group's MaxSize (%d) leaves none.", desired, g.max)
	}
	as.setReason(r, "Replacing instances: %d of %d updated.", r.done, r.total)
	return changed
}

// zoneBalancedOrder orders the old instances a refresh may terminate next so that each comes from the
// Availability Zone with the most running instances of the group once the ones before it are gone (ties keep
// the order given). User Guide, "Configure termination policies for Amazon EC2 Auto Scaling": when Auto Scaling
// terminates instances it keeps the group balanced across its enabled zones first; the zone balance takes
// precedence over the termination policy.
func zoneBalancedOrder(running, old []*instance) []*instance {
	count := map[string]int{}
	for _, inst := range running {
		count[inst.az]++
	}
	left := slices.Clone(old)
	out := make([]*instance, 0, len(old))
	for len(left) > 0 {
		best := 0
		for k := 1; k < len(left); k++ {
			if count[left[k].az] > count[left[best].az] {
				best = k
			}
		}
		out = append(out, left[best])
		count[left[best].az]--
		left = slices.Delete(left, best, best+1)
	}
	return out
}

// checkpointReached reports whether the refresh's next checkpoint is at or below pct.
func (r *instanceRefresh) checkpointReached(pct int) bool {
	return r.rollback == nil && r.nextCheck < len(r.checkpoints) && pct >= r.checkpoints[r.nextCheck]
}

// allLaunchedReady reports whether every instance launched in the phase that is still running is ready.
func (as *autoScalingService) allLaunchedReady(r *instanceRefresh) bool {
	for id := range r.launched {
		inst := as.ec2.instance(id)
		if countsTowardCapacity(inst.state) && !as.ready(r, inst) {
			return false
		}
	}
	return true
}

// observeLaunches records the instances launched on the target during the phase, when each entered InService
// (its warm-up starts then) and which left before becoming ready (failed replacements).
func (as *autoScalingService) observeLaunches(g *group, r *instanceRefresh) {
	now := as.now()
	for _, id := range g.instances {
		inst := as.ec2.instance(id)
		if inst.launchTime.Before(r.phaseStart) || !as.matches(inst, r.target) || slices.Contains(r.toReplace, id) {
			continue
		}
		if !r.launched[id] {
			r.launched[id] = true
		}
		if inst.state == string(astypes.LifecycleStateInService) && r.inServiceAt[id].IsZero() {
			r.inServiceAt[id] = now
			as.after(r.warmup, func() {})
		}
		if as.ready(r, inst) && !r.readySeen[id] {
			r.readySeen[id] = true
			r.failedSince = time.Time{}
		}
		left := isTerminating(inst.state) || inst.state == string(astypes.LifecycleStateTerminated) || inst.unhealthy
		if left && !r.failed[id] && !as.ready(r, inst) && (r.inServiceAt[id].IsZero() || now.Before(r.inServiceAt[id].Add(r.warmup)) || inst.unhealthy) {
			r.failed[id] = true
			if r.failedSince.IsZero() {
				r.failedSince = now
				as.after(refreshWaitLimit, func() {})
			}
		}
	}
}

// finishReplacing ends the replacement of the InService instances: then the warm pool, then bake time, then
// the end. User Guide, warm pools and instance refresh: the warm pool's instances are replaced after
// the InService instances.
func (as *autoScalingService) finishReplacing(g *group, r *instanceRefresh) bool {
	if g.warmPool != nil && !r.stopAtHold {
		pending := false
		changed := false
		for _, id := range append([]string(nil), g.warmPool.instances...) {
			inst := as.ec2.instance(id)
			if leavingPool(inst.state) {
				pending = true
				continue
			}
			if !as.matches(inst, r.target) {
				as.beginTerminate(inst, CauseRefresh) // the pool refills from the refresh's configuration
				pending, changed = true, true
			}
		}
		if pending {
			as.setReason(r, "Replacing the warm pool's instances.")
			return changed
		}
	}
	// BakeTime: API Reference, RefreshPreferences; status Baking (API Reference, InstanceRefresh).
	if r.rollback == nil && r.bake > 0 {
		r.status = astypes.InstanceRefreshStatusBaking
		r.holdUntil = as.now().Add(r.bake)
		as.setReason(r, "Waiting %s of bake time.", r.bake)
		as.after(r.bake, func() {})
		return true
	}
	return as.completeRefresh(g, r)
}

// completeRefresh ends a refresh (Successful) or its rollback (RollbackSuccessful). API Reference,
// StartInstanceRefresh (DesiredConfiguration): once the refresh succeeds the group's settings take the desired
// configuration.
func (as *autoScalingService) completeRefresh(g *group, r *instanceRefresh) bool {
	r.end, r.surge = as.now(), 0
	if r.rollback != nil {
		r.status = astypes.InstanceRefreshStatusRollbackSuccessful
		as.setReason(r, "Rollback completed successfully.")
		return true
	}
	r.status = astypes.InstanceRefreshStatusSuccessful
	as.setReason(r, "Instance refresh completed successfully.")
	if r.hasDesired {
		g.ltID, g.ltVersion, g.mixed = r.target.ltID, r.target.ltVersion, r.target.mixed
	}
	return true
}

// failRefresh fails a refresh, or rolls it back with AutoRollback. A failing rollback is RollbackFailed.
// API Reference, RefreshPreferences (AutoRollback) and InstanceRefresh (Status).
func (as *autoScalingService) failRefresh(g *group, r *instanceRefresh, reason string) bool {
	if r.rollback != nil {
		r.status, r.end, r.surge = astypes.InstanceRefreshStatusRollbackFailed, as.now(), 0
		as.setReason(r, "%s", strings.Replace(reason, "Instance refresh failed", "Rollback failed", 1))
		return true
	}
	if r.autoRollback {
		as.beginRollback(g, r, reason)
		return true
	}
	r.status, r.end, r.surge = astypes.InstanceRefreshStatusFailed, as.now(), 0
	as.setReason(r, "%s", reason)
	return true
}

// beginRollback replaces the instances the refresh launched with instances on the group's previous
// configuration. API Reference, RollbackInstanceRefresh and User Guide, "Undo changes with a manual or auto
// rollback": the rollback uses the refresh's preferences; instances the refresh did not yet update need no
// replacement (InstancesToUpdate keeps their count).
func (as *autoScalingService) beginRollback(g *group, r *instanceRefresh, reason string) {
	r.frozenToUpd = r.total - r.done
	r.rollback = &refreshRollback{reason: reason, start: as.now()}
	r.status = astypes.InstanceRefreshStatusRollbackInProgress
	r.target = r.prev
	var back []string
	for _, id := range g.instances {
		inst := as.ec2.instance(id)
		if countsTowardCapacity(inst.state) && !as.matches(inst, r.prev) {
			back = append(back, id)
		}
	}
	as.startPhase(r, back)
	as.setReason(r, "Rolling back: %s", reason)
}

// refreshView describes a refresh as DescribeInstanceRefreshes does.
func (as *autoScalingService) refreshView(r *instanceRefresh) astypes.InstanceRefresh {
	prefs := r.prefs
	out := astypes.InstanceRefresh{
		AutoScalingGroupName: ptr(r.group),
		InstanceRefreshId:    ptr(r.id),
		Status:               r.status,
		StatusReason:         ptr(r.reason),
		StartTime:            ptr(r.start),
		Preferences:          &prefs,
		DesiredConfiguration: r.desiredInput,
		Strategy:             astypes.RefreshStrategyRolling,
	}
	if !r.end.IsZero() {
		out.EndTime = ptr(r.end)
	}
	pct, toUpd := int32(0), int32(r.total-r.done)
	if r.total > 0 {
		pct = int32(r.done * 100 / r.total)
	} else if r.status != astypes.InstanceRefreshStatusPending {
		pct = 100
	}
	if r.rollback != nil {
		// PercentageComplete goes back to zero during a rollback; InstancesToUpdate keeps what the refresh left.
		rpct := int32(100)
		if r.total > 0 {
			rpct = int32(r.done * 100 / r.total)
		}
		out.RollbackDetails = &astypes.RollbackDetails{
			RollbackReason:               ptr(r.rollback.reason),
			RollbackStartTime:            ptr(r.rollback.start),
			PercentageCompleteOnRollback: ptr(rpct),
			InstancesToUpdateOnRollback:  ptr(int32(r.total - r.done)),
		}
		pct, toUpd = 100-rpct, int32(r.frozenToUpd)
	}
	out.PercentageComplete, out.InstancesToUpdate = ptr(pct), ptr(toUpd)
	out.ProgressDetails = &astypes.InstanceRefreshProgressDetails{LivePoolProgress: &astypes.InstanceRefreshLivePoolProgress{
		PercentageComplete: ptr(pct), InstancesToUpdate: ptr(toUpd)}}
	return out
}

// DescribeInstanceRefreshes describes a group's refreshes, newest first, all or those named in
// InstanceRefreshIds, paged by MaxRecords (default 50, at most 100) and NextToken.
// Amazon EC2 Auto Scaling API Reference, DescribeInstanceRefreshes. Errors: ValidationError.
func (c *AutoScalingClient) DescribeInstanceRefreshes(ctx context.Context, in *autoscaling.DescribeInstanceRefreshesInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeInstanceRefreshesOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:DescribeInstanceRefreshes")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	limit := 50
	if in.MaxRecords != nil {
		if *in.MaxRecords < 1 || *in.MaxRecords > 100 {
			return nil, apiError("ValidationError", "1 validation error detected: Value '%d' at 'maxRecords' failed to satisfy constraint: Member must have value between 1 and 100", *in.MaxRecords)
		}
		limit = int(*in.MaxRecords)
	}
	from := 0
	if in.NextToken != nil {
		s, ok := cutPrefix(*in.NextToken, "ir-")
		n, err := strconv.Atoi(s)
		if !ok || err != nil || n < 0 {
			return nil, apiError("ValidationError", "The token '%s' is invalid.", *in.NextToken)
		}
		from = n
	}
	out := &autoscaling.DescribeInstanceRefreshesOutput{InstanceRefreshes: []astypes.InstanceRefresh{}}
	seen := 0
	for i := len(g.refreshes) - 1; i >= 0; i-- {
		r := g.refreshes[i]
		if len(in.InstanceRefreshIds) > 0 && !slices.Contains(in.InstanceRefreshIds, r.id) {
			continue
		}
		if seen++; seen <= from {
			continue
		}
		if len(out.InstanceRefreshes) == limit {
			out.NextToken = ptr(fmt.Sprintf("ir-%d", seen-1))
			break
		}
		out.InstanceRefreshes = append(out.InstanceRefreshes, as.refreshView(r))
	}
	return out, nil
}

func activeNotFound(group string) error {
	msg := fmt.Sprintf("No in progress or pending Instance Refresh found for Auto Scaling group %s", group)
	return &astypes.ActiveInstanceRefreshNotFoundFault{Message: &msg}
}

// CancelInstanceRefresh cancels the group's active refresh or rollback: Cancelling until the launches and
// terminations in flight end (unless WaitForTransitioningInstances is false), then Cancelled. Nothing is rolled
// back. Amazon EC2 Auto Scaling API Reference, CancelInstanceRefresh. Errors: ValidationError,
// ActiveInstanceRefreshNotFound.
func (c *AutoScalingClient) CancelInstanceRefresh(ctx context.Context, in *autoscaling.CancelInstanceRefreshInput, _ ...func(*autoscaling.Options)) (*autoscaling.CancelInstanceRefreshOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:CancelInstanceRefresh")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	r := as.activeRefresh(g)
	if r == nil || r.status == astypes.InstanceRefreshStatusCancelling {
		return nil, activeNotFound(g.name)
	}
	if r.status == astypes.InstanceRefreshStatusPending {
		r.status, r.end = astypes.InstanceRefreshStatusCancelled, as.now()
		as.setReason(r, "Instance refresh cancelled before it started.")
	} else {
		r.status = astypes.InstanceRefreshStatusCancelling
		as.setReason(r, "Cancelling.")
		if in.WaitForTransitioningInstances != nil && !*in.WaitForTransitioningInstances {
			r.status, r.end, r.surge = astypes.InstanceRefreshStatusCancelled, as.now(), 0
			as.setReason(r, "Instance refresh cancelled without waiting for instances in transition.")
		}
	}
	as.settle()
	return &autoscaling.CancelInstanceRefreshOutput{InstanceRefreshId: ptr(r.id)}, nil
}

// RollbackInstanceRefresh rolls back the group's refresh that is in progress (or baking): the instances it
// replaced are replaced again with the previous configuration. Amazon EC2 Auto Scaling API Reference,
// RollbackInstanceRefresh. Errors: ValidationError, ActiveInstanceRefreshNotFound (no refresh in progress,
// after Successful among others), IrreversibleInstanceRefresh (the prerequisites are not met).
func (c *AutoScalingClient) RollbackInstanceRefresh(ctx context.Context, in *autoscaling.RollbackInstanceRefreshInput, _ ...func(*autoscaling.Options)) (*autoscaling.RollbackInstanceRefreshOutput, error) {
	as := c.s
	unlock, err := as.call(ctx, "autoscaling:RollbackInstanceRefresh")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if in == nil || in.AutoScalingGroupName == nil {
		return nil, apiError("ValidationError", "1 validation error detected: Value null at 'autoScalingGroupName' failed to satisfy constraint: Member must not be null")
	}
	g := as.group(*in.AutoScalingGroupName)
	if g == nil {
		return nil, groupNotFound(*in.AutoScalingGroupName)
	}
	r := as.latestRefresh(g)
	if r == nil || !r.rollbackAllowed() {
		return nil, activeNotFound(g.name)
	}
	if err := as.rollbackPrerequisites(r); err != nil {
		msg := fmt.Sprintf("The instance refresh cannot be rolled back: %s.", err.Error())
		return nil, &astypes.IrreversibleInstanceRefreshFault{Message: &msg}
	}
	if r.status == astypes.InstanceRefreshStatusPending {
		r.status = astypes.InstanceRefreshStatusInProgress // nothing replaced yet: the rollback has nothing to undo
	}
	as.beginRollback(g, r, "Rollback requested by RollbackInstanceRefresh.")
	as.settle()
	return &autoscaling.RollbackInstanceRefreshOutput{InstanceRefreshId: ptr(r.id)}, nil
}

// latestRefresh returns the group's newest refresh, nil when it never had one.
func (as *autoScalingService) latestRefresh(g *group) *instanceRefresh {
	if n := len(g.refreshes); n > 0 {
		return g.refreshes[n-1]
	}
	return nil
}

// EnterStandby puts an InService instance into Standby and decrements the group's desired capacity, as
// EnterStandby with ShouldDecrementDesiredCapacity does (User Guide, "Temporarily remove instances from your
// Auto Scaling group"). Setup helper: not counted.
func (as *autoScalingService) EnterStandby(instanceID string) error {
	defer as.lock()()
	inst := as.ec2.instance(instanceID)
	if inst == nil || inst.state != string(astypes.LifecycleStateInService) {
		return apiError("ValidationError", "The instance %s is not in InService.", instanceID)
	}
	g := as.groups[inst.group]
	if g.desired-1 < g.min {
		return apiError("ValidationError", "Entering standby would violate the group's min size constraint.")
	}
	inst.state = string(astypes.LifecycleStateStandby)
	from := g.desired
	g.desired--
	as.recordDesired(g, from, CallerTest)
	as.settle()
	return nil
}

// ExitStandby returns a Standby instance to service and increments the desired capacity. Setup helper.
func (as *autoScalingService) ExitStandby(instanceID string) error {
	defer as.lock()()
	inst := as.ec2.instance(instanceID)
	if inst == nil || inst.state != string(astypes.LifecycleStateStandby) {
		return apiError("ValidationError", "The instance %s is not in Standby.", instanceID)
	}
	g := as.groups[inst.group]
	if g.desired+1 > g.max {
		return apiError("ValidationError", "Exiting standby would violate the group's max size constraint.")
	}
	inst.state = string(astypes.LifecycleStateInService)
	from := g.desired
	g.desired++
	as.recordDesired(g, from, CallerTest)
	as.settle()
	return nil
}
