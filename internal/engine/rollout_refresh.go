package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/patch-agent/patch-agent/internal/logging"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// The rollout by instance refresh (strategy "refresh"): Auto Scaling replaces, the agent decides. After the
// gates and a launch template version N with the explicit AMI id, one StartInstanceRefresh replaces the
// group's instances onto version N, launching before it terminates, and never changes the desired capacity
// (Amazon EC2 Auto Scaling User Guide, "Use an instance refresh to update instances in an Auto Scaling
// group"; API Reference, StartInstanceRefresh and RefreshPreferences). The agent never writes desired
// capacity, MaxSize or scale-in protection of such a group: each new instance waits in Pending:Wait on the
// agent's launching hook until it serves in its cluster, and each old one in Terminating:Wait on its
// terminating hook while it is drained (lifecycleaction/hooks.go).
//
//	Detected/Waiting ─(gates; the agent's launching and terminating hooks present)─► Preparing
//	Preparing ─(version N; intent recorded)─► Replacing/InstanceRefresh
//	Replacing/InstanceRefresh ─(StartInstanceRefresh, or the active refresh naming version N adopted; id recorded)
//	     Successful ─► Verifying ─► Completed
//	     pause, window end, revoked approval: CancelInstanceRefresh ─(Cancelled)─► Waiting
//	     newer AMI: CancelInstanceRefresh ─(Cancelled)─► Detected
//	     Failed, ABANDONed launch, alarm ─► RollingBack/InstanceRefresh (RollbackInstanceRefresh while allowed,
//	          else a refresh back to the previous version) ─► RolledBack; or Halted/InstanceRefresh
//	     a drain held at its deadline: CancelInstanceRefresh, not waiting for it ─(Cancelled)─► Halted/InstanceRefresh
//
// A refresh the agent did not start is never cancelled: the rollout waits and says whose refresh holds the group.

// maxRefreshAlarms is how many alarms an AlarmSpecification takes (API Reference, AlarmSpecification: up to
// 10); the target's other alarms are polled by the agent.
const maxRefreshAlarms = 10

// refreshHooks returns the agent's launching and terminating hooks among the group's hooks (as described) and,
// when the group lacks the agent's launching hook or a terminating hook that drains (the agent's, or ECS's
// managed draining hook), a reason naming the missing hook and the command that adds it. An instance refresh
// without them would put instances in service before they serve and terminate them undrained.
func (o *Orchestrator) refreshHooks(group string, hooks []model.GroupHook, tags map[string]string) (launching, terminating, missing string) {
	return model.RefreshHooks(group, hooks, model.HookOwnership{QueueURL: o.QueueURL, Listed: model.ParseLifecycleHooksTag(tags)})
}

// maxHealthyPercentage is 100 + ceil(100 x batch / desired), at most 200 (API Reference, RefreshPreferences:
// MaxHealthyPercentage 100 to 200). Where both bounds cannot be honoured at MinHealthyPercentage 100, Auto
// Scaling launches one instance before it terminates one.
func maxHealthyPercentage(batch int, desired int32) int32 {
	if desired < 1 {
		return 200
	}
	return min(200, 100+int32((100*batch+int(desired)-1)/int(desired)))
}

// prepareRefresh creates (or finds again) launch template version N with the target AMI and records the
// intent of the refresh (-> Replacing/InstanceRefresh). The group keeps its own launch template reference:
// the refresh's DesiredConfiguration names version N, and the group takes it when the refresh succeeds, so a
// rollback returns to the version the group had.
func (o *Orchestrator) prepareRefresh(ctx context.Context, t model.Target, v model.GroupView, r state.Rollout) (state.Rollout, error) {
	if err := o.guardEffect(ctx, &r, "prepare the launch template"); err != nil {
		return r, err
	}
	ref, err := providers.TemplateRef(v.Group)
	if err != nil {
		return o.halt(ctx, r, err.Error(), false)
	}
	why := fmt.Sprintf("AMI %s from %s version %d", r.TargetImageID, r.Source, r.SourceVersion)
	tv, err := o.Templates.EnsureVersion(ctx, ref, r.TargetImageID, why)
	if err != nil {
		return r, err
	}
	prev := ref
	if r.PreviousTemplate != nil {
		prev = *r.PreviousTemplate
	}
	pv, err := o.Templates.Resolve(ctx, prev)
	if err != nil {
		return r, err
	}
	launching, terminating, hooksRead := "", "", time.Time{}
	if r.Refresh != nil {
		launching, terminating, hooksRead = r.Refresh.LaunchingHook, r.Refresh.TerminatingHook, r.Refresh.HooksReadAt
	}
	r.NewTemplateVersion = strconv.FormatInt(tv.Number, 10)
	r.Refresh = &state.RefreshProgress{LaunchTemplateID: ref.ID, LaunchTemplateName: ref.Name, MixedInstances: ref.MixedInstances,
		Version: r.NewTemplateVersion, PreviousVersion: strconv.FormatInt(pv.Number, 10), LaunchingHook: launching,
		TerminatingHook: terminating, HooksReadAt: hooksRead}
	refreshPreferences(t, v, r.Refresh, r.TargetImageID)
	// Instances past the maximum instance age run the target AMI already: the refresh replaces every instance.
	r.Refresh.ReplaceAll = r.Trigger == TriggerMaxInstanceAge
	return o.refreshIntent(ctx, r, "instance refresh to launch template version "+r.NewTemplateVersion+" recorded")
}

// refreshPreferences records the preferences of the next refresh, decided at its start: MinHealthyPercentage
// 100, MaxHealthyPercentage 100 + ceil(100 x batch / desired), the group's warm-up, at most 10 alarms, whether
// the group already runs the refresh's version (GroupOnVersion), and the target's canary (model/canary.go) when
// canaryOf names the rollout's AMI and no instance runs it yet; "" for a refresh that replaces the rest.
func refreshPreferences(t model.Target, v model.GroupView, p *state.RefreshProgress, canaryOf string) {
	ref, err := providers.TemplateRef(v.Group)
	p.GroupOnVersion = err == nil && ref.Version == p.Version
	p.CanaryPercentage, p.CanaryBake = 0, 0
	if canaryOf != "" && v.CountOnImage(canaryOf) == 0 {
		if pct := model.CanaryCheckpoint(t.Policy.Canary, v.Desired); pct > 0 {
			p.CanaryPercentage, p.CanaryBake = pct, int32(t.Policy.CanaryBake/time.Second)
		}
	}
	batch := t.Policy.BatchSize.Of(v.Desired)
	p.BatchSize, p.Desired = int32(batch), v.Desired
	p.MinHealthyPercentage, p.MaxHealthyPercentage = 100, maxHealthyPercentage(batch, v.Desired)
	p.InstanceWarmup = 0
	if w := v.Group.DefaultInstanceWarmup; w != nil {
		p.InstanceWarmup = *w
	} else if g := v.Group.HealthCheckGracePeriod; g != nil {
		p.InstanceWarmup = *g
	}
	p.Alarms = append([]string(nil), t.Policy.Alarms[:min(len(t.Policy.Alarms), maxRefreshAlarms)]...)
	p.ReplaceProtected = providers.ECSManagesProtection(v.Group)
	p.SpacingDelay = 0
	if _, managed := providers.GroupTags(v.Group)[model.TagECSManaged]; managed {
		p.SpacingDelay = int32(capacityProviderSpacing / time.Second)
	}
}

// capacityProviderSpacing is the CheckpointDelay after each batch of a refresh of a group ECS managed scaling
// owns. Amazon ECS Developer Guide, "Automatically manage Amazon ECS capacity with cluster auto scaling": ECS
// publishes CapacityProviderReservation once a minute and scales in after 15 consecutive datapoints below
// target. A refresh keeps one instance above the group's needs (launch before terminate); replacements chained
// without a pause keep the metric below target for longer than 15 minutes, and ECS scales an empty replacement
// in (the group shrinks, field case C23). The pause covers the old instance's last minutes in Terminating:Wait
// and two datapoints with the group at M = N (100 %).
const capacityProviderSpacing = 5 * time.Minute

// refreshIntent records the intent of the next refresh (-> Replacing/InstanceRefresh, or RollingBack/
// InstanceRefresh for a refresh back to the previous version), written before StartInstanceRefresh is sent:
// its time tells the agent's refresh from an older one that names the same version.
func (o *Orchestrator) refreshIntent(ctx context.Context, r state.Rollout, what string, history ...state.HistoryEntry) (state.Rollout, error) {
	p := r.Refresh
	p.StartedAt, p.ID, p.Status, p.StatusReason, p.PercentageComplete, p.InstancesToUpdate, p.Cancel = o.Clock.Now(), "", "", "", 0, 0, ""
	r.Current = &state.Replacement{Step: state.StepInstanceRefresh, StepStartedAt: o.Clock.Now()}
	if !p.Rollback {
		r.Phase, r.Reason = state.PhaseReplacing, "starting an instance refresh to launch template version "+p.Version
	}
	return o.save(ctx, r, what, history...)
}

// rollBackByRefresh starts the rollback by a refresh of the agent's own to the previous launch template
// version: the refresh that replaced onto the target has ended (or was never rolled back by Auto Scaling).
func (o *Orchestrator) rollBackByRefresh(ctx context.Context, r state.Rollout, why string) (state.Rollout, error) {
	p := r.Refresh
	var history []state.HistoryEntry
	if r.Phase != state.PhaseRollingBack {
		history = append(history, o.refreshHistory(r, "rolling-back", why))
	}
	switch {
	case strings.HasPrefix(r.Reason, "failed: "):
	case r.Phase != state.PhaseRollingBack || r.Reason == "":
		r.Reason = "failed: " + why
	default:
		// Already rolling back (a cancel made way for this refresh): the reason says what happens now, and
		// why, rather than going back to the failure's own words.
		r.Reason = "rolling back to launch template version " + p.PreviousVersion + " after: " + why +
			"; next step: an instance refresh to that version"
	}
	r.Phase, p.Rollback, p.ByAPI = state.PhaseRollingBack, true, false
	return o.refreshIntent(ctx, r, "rollback: instance refresh back to launch template version "+p.PreviousVersion, history...)
}

// startRefresh adopts the refresh of the recorded intent or starts it. StartInstanceRefresh takes no client
// token, so a call whose answer was lost (a crash, a timeout) is found again: an active refresh whose
// desired configuration names the recorded version, or one that names it and started after the intent was
// written, is the agent's. Any other active refresh is someone else's: it is never cancelled, and the rollout
// waits for it.
func (o *Orchestrator) startRefresh(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	p := r.Refresh
	all, err := o.refreshes().Describe(ctx, t.Group)
	if err != nil {
		return r, err
	}
	for _, ir := range all {
		if ir.Names(p.LaunchTemplateID, p.LaunchTemplateName, p.TargetVersion()) && (ir.Active() || !ir.StartTime.Before(p.StartedAt)) {
			p.ID = ir.ID
			noteRefresh(p, ir)
			return o.save(ctx, r, "instance refresh "+p.ID+" adopted (started before its id was recorded)")
		}
		if ir.Active() {
			r.Reason = foreignReason(t.Group, ir)
			if p.Rollback {
				return r, errWait // a rollback keeps its intent and starts once the group is free
			}
			// Nothing of the agent's runs: the rollout waits (start looks at the refresh again, and only then
			// goes through the gates to a new intent).
			r.Phase, r.Current = state.PhaseWaiting, nil
			return o.save(ctx, r, "waiting for instance refresh "+ir.ID+", which patch-agent did not start")
		}
	}
	if p.Rollback && p.ByAPI {
		// A rollback by RollbackInstanceRefresh of a refresh that never started (an operator's rollback while
		// the intent waited for the pause, the window or an alarm): there is nothing to roll back by API, and
		// the intent's version is the target's. A refresh of the agent's own back to the previous version
		// instead (it skips the instances already on it).
		return o.rollBackByRefresh(ctx, r, rollbackWhy(r))
	}
	what := "StartInstanceRefresh (rollback to launch template version " + p.PreviousVersion + ")"
	if !p.Rollback { // a rollback goes on through a pause and a closed window: it undoes what the rollout did
		what = "StartInstanceRefresh"
		if supersedes(ami, r) {
			// The source moved on while the intent waited (a pause, the window, an alarm): nothing of it runs,
			// so the newer AMI supersedes it now, as it would cancel the refresh once started.
			r.Current, r.Refresh = nil, nil
			return o.supersede(ctx, t, v, ami, r) // rollout_supersede.go
		}
		if err := o.holdIfPaused(&r, what); err != nil {
			return r, err
		}
		if missing := o.hooksMissingSince(t, v, r); missing != "" {
			// The hook check ran before the intent was recorded: a read since (the intent waited) that lacks the
			// agent's hook holds the start, as a start without the hook waits, until a later read finds it back.
			r.Reason = missing
			return r, errWait
		}
		if !o.amiGated {
			// An intent not started in the call that gated its AMI (it waited, or a new refresh of the same
			// rollout): the AMI gate once more, so that an AMI deregistered or refused meanwhile is not rolled.
			// It only reads, so the strongly consistent pause check stays the one right before the call.
			held := r
			held.Current = nil
			if refused, err := o.gateAMI(ctx, t, v, &held, true); refused || err != nil {
				if refused {
					return held, err
				}
				return r, err
			}
		}
		if err := o.guardEffect(ctx, &r, what); err != nil {
			return r, err
		}
		if reason := o.runGate(ctx, t); reason != "" {
			r.Reason = reason
			return r, errWait
		}
	}
	id, err := o.refreshes().Start(ctx, t.Group, p)
	switch {
	case errors.Is(err, providers.ErrRefreshInProgress):
		r.Reason = "waiting: another instance refresh holds the group (" + providers.Truncate(err.Error(), 200) + ")"
		return r, errWait
	case err != nil:
		return r, err
	}
	p.ID, p.Status = id, providers.RefreshPending
	if !p.Rollback { // a rollback's reason says what it undoes and why
		r.Reason = refreshText(p)
	}
	saved, err := o.save(ctx, r, what+" sent: instance refresh "+p.ID)
	if err == nil {
		o.rememberStarted(t.Group, saved.Refresh, v) // refreshmemo.go
	}
	return saved, err
}

// foreignPrefix starts the reason of a rollout waiting for a refresh it did not start.
const foreignPrefix = "waiting: instance refresh "

// foreignReason says which refresh the agent did not start holds the group, its status, and who finishes it.
func foreignReason(group string, ir providers.InstanceRefresh) string {
	return fmt.Sprintf(foreignPrefix+"%s (%s: %s) was not started by patch-agent; whoever started it finishes it or cancels it "+
		"(aws autoscaling cancel-instance-refresh --auto-scaling-group-name %s); patch-agent never cancels it",
		ir.ID, ir.Status, providers.Truncate(ir.StatusReason, 200), group)
}

// foreignRefresh returns the reason to go on waiting for a refresh the agent did not start ("" once none is
// active). It describes the group's refreshes only for a rollout that waits for one (r.Reason says so).
func (o *Orchestrator) foreignRefresh(ctx context.Context, t model.Target, r state.Rollout) (string, error) {
	if !strings.HasPrefix(r.Reason, foreignPrefix) {
		return "", nil
	}
	all, err := o.refreshes().Describe(ctx, t.Group)
	if err != nil {
		return "", err
	}
	for _, ir := range all {
		if ir.Active() {
			return foreignReason(t.Group, ir), nil
		}
	}
	return "", nil
}

// noteRefresh copies the refresh's status and progress to the record.
func noteRefresh(p *state.RefreshProgress, ir providers.InstanceRefresh) {
	p.Status, p.StatusReason = ir.Status, providers.Truncate(ir.StatusReason, 300)
	p.PercentageComplete, p.InstancesToUpdate = ir.PercentageComplete, ir.ToUpdate
}

// refreshes is the provider of the instance refresh calls.
func (o *Orchestrator) refreshes() providers.Refreshes {
	return providers.Refreshes{API: o.AutoScaling}
}

// refreshText is the refresh as status shows it: id, status, percentage, instances left and AWS's reason.
func refreshText(p *state.RefreshProgress) string {
	s := fmt.Sprintf("instance refresh %s %s: %d%% complete, %d instance(s) to update", p.ID, p.Status, p.PercentageComplete, p.InstancesToUpdate)
	if p.StatusReason != "" {
		s += " (" + p.StatusReason + ")"
	}
	return s
}

// refreshStep follows the rollout's refresh (Replacing/InstanceRefresh or RollingBack/InstanceRefresh): it
// sends it once, describes it (only this group, only while it is the agent's and active), decides from what it
// saw (decideRefresh: no I/O) and carries the decision out (runRefreshCommand: the write-ahead and the one
// effect). A refresh under way that the agent neither cancels nor rolls back is decided twice: the first
// decision asks for the gates, which are read (refreshFailing, then refreshStops) only then.
func (o *Orchestrator) refreshStep(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	p := r.Refresh
	if p == nil {
		return o.halt(ctx, r, "instance refresh rollout without its record", false)
	}
	if p.ID == "" {
		return o.startRefresh(ctx, t, v, ami, r)
	}
	found, err := o.describeRefresh(ctx, t.Group, p, v)
	if err != nil {
		return r, err
	}
	if len(found) == 0 {
		return o.halt(ctx, r, "instance refresh "+p.ID+" is not described by Auto Scaling", false)
	}
	seen := refreshLook{refresh: found[0]}
	noteRefresh(p, seen.refresh)
	c := decideRefresh(r, v, seen)
	if c.kind == refreshReadGates {
		if seen.failing, err = o.refreshFailing(ctx, t, v, r); err != nil {
			return r, err
		}
		if seen.failing == "" {
			if seen.stops, err = o.refreshStops(t, v, ami, r); err != nil {
				return r, err
			}
		}
		seen.gatesRead = true
		c = decideRefresh(r, v, seen)
	}
	return o.runRefreshCommand(ctx, t, v, ami, r, seen.refresh, c)
}

// refreshLook is what a look at the agent's refresh saw: Auto Scaling's description of it and, once read
// (gatesRead), why it must halt (failing: an ABANDONed launch, a held drain, an alarm) and why it must stop
// (stops: a pause, the window's end, a withdrawn approval, a newer AMI); "" when none.
type refreshLook struct {
	refresh        providers.InstanceRefresh
	failing, stops string
	gatesRead      bool
}

// refreshCommandKind is the one thing a look at the agent's refresh does next.
type refreshCommandKind int

const (
	refreshWait           refreshCommandKind = iota // nothing to do: the rollout waits, saying why
	refreshReadGates                                // under way: read the gates and decide again
	refreshVerify                                   // Successful: on to Verifying
	refreshHaltIt                                   // halt for refreshCommand.halt (haltRefresh)
	refreshHaltRollout                              // the rollback failed or was cancelled: Halted (refreshHalted)
	refreshRolledBackDone                           // the rollback succeeded: RolledBack (refreshRolledBack)
	refreshBackByRefresh                            // the refresh ended before the rollback reached it: refresh back
	refreshFollowRollback                           // rolled back outside the agent: the rollout follows it
	refreshCancelIt                                 // cancel it (cancelRefresh) for refreshCommand.reason
	refreshCancelledThen                            // Cancelled: move on (refreshCancelled)
	refreshRollBackByAPI                            // RollbackInstanceRefresh (rollbackRefresh)
)

// refreshCommand is decideRefresh's decision: its kind, the reason the rollout shows or the cancel records or
// the transition's log says, and, for refreshHaltIt, the halt to record.
type refreshCommand struct {
	kind   refreshCommandKind
	reason string
	halt   string
}

// decideRefresh decides what a look at the agent's refresh does from the rollout record r, the group's view v
// and what the look saw, with no I/O: the refresh's status first (Successful, Failed, Cancelled, a rollback's
// end), then a cancel or rollback the record carries, then — the refresh under way — the gates, asked for with
// refreshReadGates until seen.gatesRead. r.Refresh is not nil and names the refresh described.
func decideRefresh(r state.Rollout, v model.GroupView, seen refreshLook) refreshCommand {
	p, ir := r.Refresh, seen.refresh
	if p.Rollback && p.ByAPI && !ir.Active() && ir.Status != providers.RefreshRollbackSuccessful && ir.Status != providers.RefreshRollbackFailed {
		// The refresh ended before RollbackInstanceRefresh reached it: a refresh back to the previous version.
		return refreshCommand{kind: refreshBackByRefresh, reason: rollbackWhy(r)}
	}
	switch ir.Status {
	case providers.RefreshSuccessful:
		switch {
		case p.Rollback:
			return refreshCommand{kind: refreshRolledBackDone}
		case p.Halt != "": // it ended before the cancel that made way for the halt reached it
			return refreshCommand{kind: refreshHaltIt, halt: p.Halt}
		}
		return refreshCommand{kind: refreshVerify, reason: "instance refresh " + p.ID + " Successful"}
	case providers.RefreshRollbackSuccessful:
		return refreshCommand{kind: refreshRolledBackDone}
	case providers.RefreshRollbackFailed:
		return refreshCommand{kind: refreshHaltRollout, reason: "rollback of instance refresh " + p.ID + " failed: " + p.StatusReason}
	case providers.RefreshFailed:
		if p.Rollback {
			return refreshCommand{kind: refreshHaltRollout, reason: "rollback refresh " + p.ID + " to launch template version " + p.PreviousVersion + " failed: " + p.StatusReason}
		}
		halt := p.Halt
		if halt == "" {
			halt = "instance refresh " + p.ID + " failed: " + p.StatusReason
		}
		return refreshCommand{kind: refreshHaltIt, halt: halt}
	case providers.RefreshCancelled:
		return refreshCommand{kind: refreshCancelledThen}
	case providers.RefreshCancelling:
		return refreshCommand{kind: refreshWait, reason: "cancelling " + refreshText(p) + ": the agent completes the lifecycle actions in flight"}
	case providers.RefreshRollbackInProgress:
		if !p.Rollback { // rolled back by someone else (or Auto Scaling): the rollout follows it
			return refreshCommand{kind: refreshFollowRollback, reason: "instance refresh " + p.ID + " rolling back outside the agent"}
		}
		return refreshCommand{kind: refreshWait, reason: "rolling back: " + refreshText(p)}
	}
	// Pending, InProgress, Baking.
	switch {
	case p.Cancel != "": // the cancel was recorded and not seen through yet (a crash, an error)
		return refreshCommand{kind: refreshCancelIt, reason: p.Cancel}
	case p.Rollback && p.ByAPI:
		return refreshCommand{kind: refreshRollBackByAPI}
	case p.Rollback:
		return refreshCommand{kind: refreshWait, reason: "rolling back to launch template version " + p.PreviousVersion + ": " + refreshText(p)}
	case !seen.gatesRead:
		return refreshCommand{kind: refreshReadGates}
	case seen.failing != "":
		return refreshCommand{kind: refreshHaltIt, halt: seen.failing}
	case seen.stops != "":
		return refreshCommand{kind: refreshCancelIt, reason: seen.stops}
	}
	reason := refreshText(p) + heldBy(v)
	if v.Desired >= v.Max && p.PercentageComplete < 100 {
		reason += fmt.Sprintf("; the group is at its MaxSize (%d): the refresh launches before it terminates and waits for room. "+
			"patch-agent never raises MaxSize; raise it by the batch size (%d) where the group is defined", v.Max, p.BatchSize)
	}
	return refreshCommand{kind: refreshWait, reason: reason}
}

// runRefreshCommand carries out c, decided on r and the refresh ir: each kind's write-ahead and its one effect.
func (o *Orchestrator) runRefreshCommand(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout,
	ir providers.InstanceRefresh, c refreshCommand) (state.Rollout, error) {
	p := r.Refresh
	switch c.kind {
	case refreshWait:
		r.Reason = c.reason
		return r, errWait
	case refreshVerify:
		r.Phase, r.Current, r.Reason = state.PhaseVerifying, nil, ""
		return o.save(ctx, r, c.reason)
	case refreshHaltIt:
		p.Halt = c.halt
		return o.haltRefresh(ctx, t, r, ir)
	case refreshHaltRollout:
		return o.refreshHalted(ctx, r, c.reason)
	case refreshRolledBackDone:
		return o.refreshRolledBack(ctx, r)
	case refreshBackByRefresh:
		return o.rollBackByRefresh(ctx, r, c.reason)
	case refreshFollowRollback:
		p.Rollback, p.ByAPI = true, true
		r.Phase = state.PhaseRollingBack
		return o.save(ctx, r, c.reason)
	case refreshCancelIt:
		return o.cancelRefresh(ctx, t, r, c.reason)
	case refreshCancelledThen:
		return o.refreshCancelled(ctx, t, v, ami, r)
	case refreshRollBackByAPI:
		return o.rollbackRefresh(ctx, t, r)
	}
	return r, fmt.Errorf("instance refresh %s: no command %d to run", p.ID, c.kind)
}

// heldBy names the instances the agent's lifecycle hooks hold in the refresh: new ones in Pending:Wait until
// they serve, old ones in Terminating:Wait while they drain ("" when none).
func heldBy(v model.GroupView) string {
	var launching, draining []string
	for _, i := range v.Instances {
		switch i.LifecycleState {
		case "Pending:Wait":
			launching = append(launching, i.ID)
		case "Terminating:Wait":
			draining = append(draining, i.ID)
		}
	}
	s := ""
	if len(launching) > 0 {
		s += "; launching hook holds " + strings.Join(launching, ", ") + " until it serves"
	}
	if len(draining) > 0 {
		s += "; terminating hook holds " + strings.Join(draining, ", ") + " while it drains"
	}
	return s
}

// refreshFailing returns why the refresh must halt now ("" when it need not): a launch the agent's launching
// hook ABANDONed (the first one halts; Auto Scaling would retry for up to an hour), a drain the agent's
// terminating hook held at its deadline (heldDrain), or one of the target's alarms in ALARM (those beyond the
// AlarmSpecification's 10 are polled here).
func (o *Orchestrator) refreshFailing(ctx context.Context, t model.Target, v model.GroupView, r state.Rollout) (string, error) {
	p := r.Refresh
	if p.LaunchingHook != "" {
		for _, i := range v.Instances {
			// Only a launch of the target AMI tells about it: an instance on another AMI that the agent
			// abandoned (one a scale out drew from the warm pool: outdatedPoolLaunch) is no failed replacement,
			// whatever its launch time says (EC2 reports an instance's last start).
			if !i.Leaving() || i.LaunchTime.Before(p.StartedAt) || i.ImageID != "" && i.ImageID != r.TargetImageID {
				continue
			}
			h, err := o.Store.GetHook(ctx, model.ActionKey(t.Group, i.ID, p.LaunchingHook))
			if errors.Is(err, state.ErrNotFound) {
				continue
			}
			if err != nil {
				return "", fmt.Errorf("reading the launching action of %s: %w", i.ID, err)
			}
			if h.Result == model.ResultAbandon || h.Decided == model.ResultAbandon {
				return fmt.Sprintf("launch of %s ABANDONed by lifecycle hook %s (%s)", i.ID, p.LaunchingHook, h.Note), nil
			}
		}
	}
	if halt, err := o.heldDrain(ctx, t, v, r); err != nil || halt != "" {
		return halt, err
	}
	if len(t.Policy.Alarms) > 0 && o.Alarms != nil {
		firing, err := o.Alarms.InAlarm(ctx, t.Policy.Alarms)
		if err == nil && len(firing) > 0 {
			return fmt.Sprintf("alarm(s) %s in ALARM during instance refresh %s", strings.Join(firing, ", "), p.ID), nil
		}
	}
	return "", nil
}

// heldDrain returns the halt of a refresh one of whose old instances waits in Terminating:Wait with its drain
// held at the deadline during this refresh (lifecycleaction/hooks_hold.go), "" when none is. The terminating hook is the one
// the rollout recorded, else the agent's hook DescribeLifecycleHooks names (a record written without it).
func (o *Orchestrator) heldDrain(ctx context.Context, t model.Target, v model.GroupView, r state.Rollout) (string, error) {
	p := r.Refresh
	hook := p.TerminatingHook
	for _, i := range v.Instances {
		if i.LifecycleState != "Terminating:Wait" {
			continue
		}
		if hook == "" {
			hooks, err := providers.DescribeGroupHooks(ctx, o.AutoScaling, t.Group)
			if err != nil {
				return "", err
			}
			_, terminating, _ := o.refreshHooks(t.Group, hooks, providers.GroupTags(v.Group))
			if terminating == "" {
				return "", nil
			}
			hook = terminating
		}
		h, err := o.hookRecord(ctx, model.ActionKey(t.Group, i.ID, hook))
		if errors.Is(err, state.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("reading the terminating action of %s: %w", i.ID, err)
		}
		if h.State != state.HookCompleted && !h.DrainHeldAt.IsZero() && !h.DrainHeldAt.Before(p.StartedAt) {
			return model.HeldDrainHalt(t.Group, i.ID, hook, h.Note), nil
		}
	}
	return "", nil
}

// hookRecord returns the record of the lifecycle action under key: the one this process keeps under its claim
// (HookKept), else the store's (state.ErrNotFound when there is none).
func (o *Orchestrator) hookRecord(ctx context.Context, key string) (state.Hook, error) {
	if o.HookKept != nil {
		if h, ok := o.HookKept(key); ok {
			return h, nil
		}
	}
	return o.Store.GetHook(ctx, key)
}

// refreshStops returns why the agent cancels its refresh in progress ("" when it goes on): a pause, the end of
// the maintenance window, an approval that no longer names the target, a newer AMI, or the agent's launching
// or terminating hook gone from the group since the refresh started (hooksLost). Each starts a new refresh
// later, through every gate again, that skips the instances already on the target.
func (o *Orchestrator) refreshStops(t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (string, error) {
	pause, err := o.currentPause()
	if err != nil {
		return "", fmt.Errorf("reading pause locks during instance refresh %s: %w", r.Refresh.ID, err)
	}
	switch {
	case pause != nil:
		held := r
		_ = o.holdIfPaused(&held, nextRefreshStep)
		return held.Reason, nil
	case supersedes(ami, r):
		return newerAMIPrefix + ami.ImageID, nil
	case t.Policy.Approval == model.ApprovalManual && r.ApprovedImage != r.TargetImageID:
		return fmt.Sprintf("approval: withdrawn for AMI %s; waiting for `patch-agent approve %s`", r.TargetImageID, t.Group), nil
	}
	if w := t.Policy.Window; w != nil {
		if open, at := w.State(o.Clock.Now()); !open {
			return fmt.Sprintf("maintenance window (%s) closed; opens at %s", w.Describe(), at.Format(time.RFC3339)), nil
		}
	}
	return o.hooksLost(t, v, r), nil
}

// hooksLost says which of the agent's lifecycle hooks the group lost since its refresh started, as this process
// last described the group's hooks after the start (KnownHooks: the hook check every poll interval, each
// lifecycle action's first look), "" when none or when no read since the start says (the start read them). Without its launching hook
// Auto Scaling puts new instances in service before they serve; without a terminating hook that drains, it
// terminates old ones undrained: the refresh is cancelled and the rollout waits, as at a start, until the hook
// is back (docs/deploy.md, "Lifecycle hooks").
func (o *Orchestrator) hooksLost(t model.Target, v model.GroupView, r state.Rollout) string {
	if missing := o.hooksMissingSince(t, v, r); missing != "" {
		return "lifecycle hook removed during the refresh: " + missing
	}
	return ""
}

// hooksMissingSince says which of the agent's lifecycle hooks the group lacks as this process last described
// them (KnownHooks), "" when none or when that read is not later than the start's own read of the hooks
// (HooksReadAt; the intent's StartedAt in records without it).
func (o *Orchestrator) hooksMissingSince(t model.Target, v model.GroupView, r state.Rollout) string {
	if o.KnownHooks == nil || r.Refresh == nil {
		return ""
	}
	read := r.Refresh.HooksReadAt
	if read.IsZero() {
		read = r.Refresh.StartedAt
	}
	hooks, at, ok := o.KnownHooks(t.Group)
	if !ok || !at.After(read) {
		return ""
	}
	_, _, missing := o.refreshHooks(t.Group, hooks, providers.GroupTags(v.Group))
	return missing
}

// supersedes reports whether the AMI the source names now (nil: unknown) replaces the rollout's target: another
// AMI than the target, and not the one an operator's rollback rolled away from.
func supersedes(ami *model.ResolvedAMI, r state.Rollout) bool {
	return ami != nil && ami.ImageID != r.TargetImageID && ami.ImageID != r.RollbackFrom
}

// newerAMIPrefix starts the cancel reason of a refresh a newer AMI supersedes.
const newerAMIPrefix = "newer AMI "

// cancelRefresh records why and cancels the agent's refresh (CancelInstanceRefresh: Cancelling until the
// launches and terminations in flight end, whose lifecycle actions the agent keeps completing, then
// Cancelled; nothing is rolled back). The reason is written first, so that a crash after the call still
// knows the cancel was the agent's.
func (o *Orchestrator) cancelRefresh(ctx context.Context, t model.Target, r state.Rollout, why string) (state.Rollout, error) {
	p := r.Refresh
	cancelling := "cancelling instance refresh " + p.ID + ": " + why
	if p.Cancel != why {
		p.Cancel = why
		if r.Phase == state.PhaseReplacing { // a rollback keeps its failure as the reason
			r.Reason = cancelling // status says why the refresh stops from the write that records it
		}
		next, err := o.save(ctx, r, cancelling)
		if err != nil {
			return next, err
		}
		r, p = next, next.Refresh
	}
	if mine, err := o.inFlight(ctx, t.Group, p.ID); err != nil || !mine {
		r.Reason = cancelling
		return r, cmp.Or(err, errWait) // the next look decides on what the refresh became
	}
	// A held drain's instance waits in Terminating:Wait until the hook's global timeout: a cancel that waited
	// for the terminations in flight would wait as long.
	if err := o.refreshes().Cancel(ctx, t.Group, !model.IsHeldDrainHalt(strings.TrimPrefix(why, "halted: "))); err != nil {
		return r, err
	}
	r.Reason = cancelling
	return r, errWait
}

// refreshCancelled moves on from a Cancelled refresh: to Waiting with the gate's reason, to Detected for a
// newer AMI, to the halt the cancel made way for; a refresh someone else cancelled halts the rollout.
func (o *Orchestrator) refreshCancelled(ctx context.Context, t model.Target, v model.GroupView, ami *model.ResolvedAMI, r state.Rollout) (state.Rollout, error) {
	p := r.Refresh
	switch {
	case p.Halt != "":
		return o.haltRefresh(ctx, t, r, providers.InstanceRefresh{Status: providers.RefreshCancelled})
	case p.Rollback:
		return o.refreshHalted(ctx, r, "rollback refresh "+p.ID+" was cancelled outside patch-agent")
	case p.Cancel == "":
		return o.refreshHalted(ctx, r, "instance refresh "+p.ID+" was cancelled outside patch-agent ("+p.StatusReason+")")
	case strings.HasPrefix(p.Cancel, newerAMIPrefix) && supersedes(ami, r):
		r.Current, r.Refresh = nil, nil
		return o.supersede(ctx, t, v, ami, r)
	}
	reason := p.Cancel
	r.Phase, r.Reason, r.Current, r.Refresh = state.PhaseWaiting, reason, nil, nil
	return o.save(ctx, r, "instance refresh "+p.ID+" cancelled: "+reason)
}

// haltRefresh halts the rollout for p.Halt: with the policy's rollback, RollbackInstanceRefresh while the
// refresh allows it (in progress or baking), else the refresh is cancelled first and a refresh of the agent's
// own takes the group back to the previous version; without rollback the refresh is cancelled and the rollout
// halts.
func (o *Orchestrator) haltRefresh(ctx context.Context, t model.Target, r state.Rollout, ir providers.InstanceRefresh) (state.Rollout, error) {
	p := r.Refresh
	// An operator's rollback always rolls back; a held drain never does: the rollout stops where it is and the
	// old instance serves again (lifecycleaction/hooks_hold.go).
	rollback := (o.Policy.RollbackOnFailure && !model.IsHeldDrainHalt(p.Halt) || p.Rollback) && p.PreviousVersion != ""
	switch ir.Status {
	case providers.RefreshPending, providers.RefreshInProgress, providers.RefreshBaking:
		if !rollback {
			return o.cancelRefresh(ctx, t, r, "halted: "+p.Halt)
		}
		r.Phase, r.Reason = state.PhaseRollingBack, "failed: "+p.Halt
		p.Rollback, p.ByAPI = true, true
		next, err := o.save(ctx, r, "rolling-back", o.refreshHistory(r, "rolling-back", p.Halt))
		if err != nil {
			return next, err
		}
		return o.rollbackRefresh(ctx, t, next)
	case providers.RefreshCancelling:
		r.Reason = "cancelling instance refresh " + p.ID + " before the halt: " + p.Halt
		return r, errWait
	}
	if !rollback {
		return o.refreshHalted(ctx, r, p.Halt)
	}
	// The refresh ended (Failed, Cancelled): a refresh of the agent's own to the previous version.
	return o.rollBackByRefresh(ctx, r, p.Halt)
}

// rollbackRefresh sends RollbackInstanceRefresh for the refresh in progress (written before: Rollback, ByAPI).
// Where Auto Scaling refuses it (IrreversibleInstanceRefresh: the group's previous configuration names $Latest
// or $Default, say), the refresh is cancelled and a refresh to the previous version follows.
func (o *Orchestrator) rollbackRefresh(ctx context.Context, t model.Target, r state.Rollout) (state.Rollout, error) {
	p := r.Refresh
	if p.GroupOnVersion {
		// An earlier refresh of the rollout (a canary's) already moved the group to Version: Auto Scaling would
		// roll this one back to Version, not to PreviousVersion. Cancelled, then a refresh back instead.
		p.ByAPI = false
		p.Halt = rollbackWhy(r)
		return o.cancelRefresh(ctx, t, r, "rolling back: the group already runs launch template version "+p.Version+" since an earlier refresh")
	}
	if mine, err := o.inFlight(ctx, t.Group, p.ID); err != nil || !mine {
		return r, cmp.Or(err, errWait) // the next look decides on what the refresh became
	}
	err := o.refreshes().Rollback(ctx, t.Group)
	switch {
	case errors.Is(err, providers.ErrRollbackRefused):
		o.Log.Info("instance refresh cannot be rolled back by Auto Scaling; cancelling it, then a refresh to the previous version",
			zap.String(logging.Group, t.Group), zap.Error(err))
		p.ByAPI = false
		p.Halt = rollbackWhy(r)
		return o.cancelRefresh(ctx, t, r, "rolling back: "+providers.Truncate(err.Error(), 200))
	case err != nil:
		return r, err
	}
	r.Reason = "rolling back instance refresh " + p.ID + " (RollbackInstanceRefresh)"
	return r, errWait
}

// inFlight describes the agent's refresh id afresh (never from the RefreshMemo) and reports whether it is
// pending, in progress or baking. CancelInstanceRefresh and RollbackInstanceRefresh name no refresh: they act
// on the group's active one, which is someone else's once the agent's ended and another started, so each is
// sent only right after this look finds the agent's own still under way.
func (o *Orchestrator) inFlight(ctx context.Context, group, id string) (bool, error) {
	o.RefreshMemo.forget(group)
	found, err := o.refreshes().Describe(ctx, group, id)
	if err != nil || len(found) == 0 {
		return false, err
	}
	switch found[0].Status {
	case providers.RefreshPending, providers.RefreshInProgress, providers.RefreshBaking:
		return true, nil
	}
	return false, nil
}

// rollbackWhy is why the rollout rolls back, for status and history.
func rollbackWhy(r state.Rollout) string {
	p := r.Refresh
	switch {
	case p.Halt != "":
		return p.Halt
	case p.RequestedBy != "":
		return "manual rollback by " + p.RequestedBy
	}
	return "rollback requested"
}

// refreshRolledBack ends a rollback: the group runs the previous version again.
func (o *Orchestrator) refreshRolledBack(ctx context.Context, r state.Rollout) (state.Rollout, error) {
	p := r.Refresh
	why := rollbackWhy(r)
	if p.Halt == "" && p.RequestedBy == "" {
		why = "instance refresh " + p.ID + " rolled back outside the agent"
	}
	r.Phase, r.Current, r.RollbackFrom, r.Reason = state.PhaseRolledBack, nil, r.TargetImageID, "rolled back after: "+why
	return o.save(ctx, r, "rolled-back", state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "rolled-back",
		PreviousImage: r.TargetImageID, NewImage: r.PreviousImageID, Source: r.Source, SourceVersion: r.SourceVersion, Detail: why})
}

// refreshHalted halts the rollout without a rollback (Halted/InstanceRefresh).
func (o *Orchestrator) refreshHalted(ctx context.Context, r state.Rollout, reason string) (state.Rollout, error) {
	r.Phase, r.Reason = state.PhaseHalted, "failed: "+reason
	o.Log.Error("rollout halted", zap.String(logging.Group, r.Group), zap.String(logging.Reason, reason))
	next, err := o.save(ctx, r, "halted", o.refreshHistory(r, "halted", reason))
	if err == nil {
		err = errWait
	}
	return next, err
}

func (o *Orchestrator) refreshHistory(r state.Rollout, event, detail string) state.HistoryEntry {
	return state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: event, PreviousImage: r.PreviousImageID,
		NewImage: r.TargetImageID, Source: r.Source, SourceVersion: r.SourceVersion, Detail: detail}
}

// verifyRefresh completes a refresh rollout once every in-service instance runs the target AMI; an outdated
// instance (launched by someone from the old configuration meanwhile) is replaced by a new refresh.
func (o *Orchestrator) verifyRefresh(ctx context.Context, t model.Target, v model.GroupView, r state.Rollout) (state.Rollout, error) {
	for _, i := range v.Instances {
		if i.Leaving() {
			continue
		}
		if !i.InService() {
			r.Reason = fmt.Sprintf("waiting for %s to settle (%s)", i.ID, i.LifecycleState)
			return r, errWait
		}
		if i.ImageID != r.TargetImageID && r.Refresh != nil {
			if err := o.holdIfPaused(&r, "a new instance refresh for "+i.ID); err != nil {
				return r, err
			}
			refreshPreferences(t, v, r.Refresh, "")
			r.Refresh.ReplaceAll = false // only the outdated instances
			return o.refreshIntent(ctx, r, fmt.Sprintf("instance %s runs %s: a new instance refresh", i.ID, i.ImageID))
		}
	}
	r.Phase, r.Reason = state.PhaseCompleted, ""
	return o.save(ctx, r, "rollout completed", state.HistoryEntry{Group: r.Group, At: o.Clock.Now(), Event: "completed",
		PreviousImage: r.PreviousImageID, NewImage: r.TargetImageID, Source: r.Source, SourceVersion: r.SourceVersion,
		Detail: fmt.Sprintf("%d instance(s) on the target AMI, replaced by instance refresh %s", v.CountOnImage(r.TargetImageID), refreshID(r))})
}

func refreshID(r state.Rollout) string {
	if r.Refresh == nil {
		return ""
	}
	return r.Refresh.ID
}
