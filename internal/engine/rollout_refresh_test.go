package engine

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/awsapi"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// fakeRefreshes answers the instance refresh calls of one group and its lifecycle hooks; every other Auto
// Scaling call panics (the embedded nil interface), so a test fails if the executor makes one.
type fakeRefreshes struct {
	awsapi.AutoScaling
	now         func() time.Time
	refreshes   []astypes.InstanceRefresh // oldest first
	starts      []*autoscaling.StartInstanceRefreshInput
	cancels     int
	cancelWaits []bool // WaitForTransitioningInstances of each cancel (true when not given)
	rollbacks   int
	rollbackErr error
	hooks       []astypes.LifecycleHook
}

func (f *fakeRefreshes) DescribeLifecycleHooks(context.Context, *autoscaling.DescribeLifecycleHooksInput, ...func(*autoscaling.Options)) (*autoscaling.DescribeLifecycleHooksOutput, error) {
	return &autoscaling.DescribeLifecycleHooksOutput{LifecycleHooks: f.hooks}, nil
}

func (f *fakeRefreshes) DescribeInstanceRefreshes(_ context.Context, in *autoscaling.DescribeInstanceRefreshesInput, _ ...func(*autoscaling.Options)) (*autoscaling.DescribeInstanceRefreshesOutput, error) {
	out := &autoscaling.DescribeInstanceRefreshesOutput{}
	for i := len(f.refreshes) - 1; i >= 0; i-- {
		if ir := f.refreshes[i]; len(in.InstanceRefreshIds) == 0 || slices.Contains(in.InstanceRefreshIds, aws.ToString(ir.InstanceRefreshId)) {
			out.InstanceRefreshes = append(out.InstanceRefreshes, ir)
		}
	}
	return out, nil
}

func (f *fakeRefreshes) StartInstanceRefresh(_ context.Context, in *autoscaling.StartInstanceRefreshInput, _ ...func(*autoscaling.Options)) (*autoscaling.StartInstanceRefreshOutput, error) {
	for _, ir := range f.refreshes {
		if (providers.InstanceRefresh{Status: string(ir.Status)}).Active() {
			return nil, &astypes.InstanceRefreshInProgressFault{Message: aws.String("in progress")}
		}
	}
	f.starts = append(f.starts, in)
	id := fmt.Sprintf("ir-%d", len(f.refreshes)+1)
	f.refreshes = append(f.refreshes, astypes.InstanceRefresh{InstanceRefreshId: aws.String(id), Status: astypes.InstanceRefreshStatusPending,
		StartTime: aws.Time(f.now()), DesiredConfiguration: in.DesiredConfiguration})
	return &autoscaling.StartInstanceRefreshOutput{InstanceRefreshId: aws.String(id)}, nil
}

func (f *fakeRefreshes) CancelInstanceRefresh(_ context.Context, in *autoscaling.CancelInstanceRefreshInput, _ ...func(*autoscaling.Options)) (*autoscaling.CancelInstanceRefreshOutput, error) {
	f.cancels++
	f.cancelWaits = append(f.cancelWaits, in.WaitForTransitioningInstances == nil || *in.WaitForTransitioningInstances)
	last := &f.refreshes[len(f.refreshes)-1]
	last.Status = astypes.InstanceRefreshStatusCancelling
	return &autoscaling.CancelInstanceRefreshOutput{InstanceRefreshId: last.InstanceRefreshId}, nil
}

func (f *fakeRefreshes) RollbackInstanceRefresh(context.Context, *autoscaling.RollbackInstanceRefreshInput, ...func(*autoscaling.Options)) (*autoscaling.RollbackInstanceRefreshOutput, error) {
	f.rollbacks++
	if f.rollbackErr != nil {
		return nil, f.rollbackErr
	}
	last := &f.refreshes[len(f.refreshes)-1]
	last.Status = astypes.InstanceRefreshStatusRollbackInProgress
	return &autoscaling.RollbackInstanceRefreshOutput{InstanceRefreshId: last.InstanceRefreshId}, nil
}

// fakeAlarms has no alarm in ALARM.
type fakeAlarms struct{}

func (fakeAlarms) InAlarm(context.Context, []string) ([]string, error) { return nil, nil }

// groupWrites are the calls of the rollout that write the group (desired capacity, MaxSize, protection,
// terminations).
func groupWrites(rg *rig) []groupCall {
	var out []groupCall
	for _, c := range rg.groups.calls {
		if c.Op != "Traits" && c.Op != "Members" {
			out = append(out, c)
		}
	}
	return out
}

// refreshNaming is a refresh of version on lt-1 with status, started at start.
func refreshNaming(id, version string, status astypes.InstanceRefreshStatus, start time.Time) astypes.InstanceRefresh {
	return astypes.InstanceRefresh{InstanceRefreshId: aws.String(id), Status: status, StartTime: aws.Time(start),
		StatusReason: aws.String("reason of " + id), PercentageComplete: aws.Int32(40), InstancesToUpdate: aws.Int32(3),
		DesiredConfiguration: &astypes.DesiredConfiguration{LaunchTemplate: &astypes.LaunchTemplateSpecification{
			LaunchTemplateId: aws.String("lt-1"), Version: aws.String(version)}}}
}

// refreshRig is the rig with its fake refresh API (the agent's hooks on the group) and strategy refresh.
func refreshRig() (*rig, *fakeRefreshes) {
	rg := newRig()
	rg.target.Policy.Strategy = model.StrategyRefresh
	return rg, rg.o.AutoScaling.(*fakeRefreshes)
}

// refreshing is a record in the agent's refresh: intent written a minute ago, refresh id (may be "").
func refreshing(id string) state.Rollout {
	r := replacing(model.StrategyRefresh, state.StepInstanceRefresh)
	r.Current.OldInstanceID = ""
	r.Refresh = &state.RefreshProgress{LaunchTemplateID: "lt-1", Version: "2", PreviousVersion: "1", MinHealthyPercentage: 100,
		MaxHealthyPercentage: 134, BatchSize: 1, Desired: 3, LaunchingHook: "patch-agent-launch", StartedAt: now0.Add(-time.Minute), ID: id}
	return r
}

func oldFleet() model.GroupView {
	return view(3, false, serving("i-1", amiOld), serving("i-2", amiOld), serving("i-3", amiOld))
}

func refreshTransitionCases() []transitionCase {
	inRefresh := func(status astypes.InstanceRefreshStatus, change func(*state.Rollout)) func(rg *rig) model.Inputs {
		return func(rg *rig) model.Inputs {
			f := rg.o.AutoScaling.(*fakeRefreshes)
			f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", status, now0.Add(-time.Minute))}
			rec := refreshing("ir-1")
			if change != nil {
				change(&rec)
			}
			rg.seed0(rec)
			return model.Inputs{View: oldFleet(), AMI: newAMI()}
		}
	}
	cases := []transitionCase{
		{from: pos(state.PhasePreparing, ""), to: pos(state.PhaseReplacing, state.StepInstanceRefresh), why: "intent recorded, then one StartInstanceRefresh",
			setup: func(rg *rig) model.Inputs {
				rg.seed0(state.Rollout{Phase: state.PhasePreparing, Strategy: model.StrategyRefresh, TargetImageID: amiNew, PreviousImageID: amiOld,
					PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}, Refresh: &state.RefreshProgress{LaunchingHook: "patch-agent-launch"}})
				return model.Inputs{View: oldFleet(), AMI: newAMI()}
			},
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				f := rg.o.AutoScaling.(*fakeRefreshes)
				require.Len(t, f.starts, 1)
				require.Equal(t, "ir-1", stored.Refresh.ID, "the refresh id is recorded after the call")
				require.Empty(t, groupWrites(rg), "the group's desired capacity, MaxSize and launch template are not written")
			}},
		{from: pos(state.PhaseVerifying, ""), to: pos(state.PhaseReplacing, state.StepInstanceRefresh), why: "an instance launched from the old version",
			setup: func(rg *rig) model.Inputs {
				rec := refreshing("ir-1")
				rec.Phase, rec.Current = state.PhaseVerifying, nil
				rg.seed0(rec)
				return model.Inputs{View: view(2, false, serving("i-4", amiNew), serving("i-5", amiOld)), AMI: newAMI()}
			}},
		{from: pos(state.PhaseReplacing, state.StepInstanceRefresh), to: pos(state.PhaseVerifying, ""), why: "Successful",
			setup: inRefresh(astypes.InstanceRefreshStatusSuccessful, nil)},
		{from: pos(state.PhaseReplacing, state.StepInstanceRefresh), to: pos(state.PhaseWaiting, ""), why: "cancelled for the window",
			setup: inRefresh(astypes.InstanceRefreshStatusCancelled, func(r *state.Rollout) { r.Refresh.Cancel = "maintenance window closed" }),
			check: func(t *testing.T, _ *rig, stored state.Rollout) {
				require.Equal(t, "maintenance window closed", stored.Reason)
				require.Nil(t, stored.Refresh, "the next refresh is recorded anew")
			}},
		{from: pos(state.PhaseReplacing, state.StepInstanceRefresh), to: pos(state.PhaseDetected, ""), why: "cancelled for a newer AMI",
			setup: inRefresh(astypes.InstanceRefreshStatusCancelled, func(r *state.Rollout) {
				r.TargetImageID, r.Refresh.Cancel = amiBad, newerAMIPrefix+amiNew
			}),
			check: func(t *testing.T, _ *rig, stored state.Rollout) { require.Equal(t, amiNew, stored.TargetImageID) }},
		{from: pos(state.PhaseReplacing, state.StepInstanceRefresh), to: pos(state.PhaseRollingBack, state.StepInstanceRefresh), why: "Failed: a refresh back",
			setup: inRefresh(astypes.InstanceRefreshStatusFailed, nil),
			check: func(t *testing.T, rg *rig, stored state.Rollout) {
				f := rg.o.AutoScaling.(*fakeRefreshes)
				require.Contains(t, stored.Reason, "reason of ir-1", "AWS's StatusReason is shown")
				require.Len(t, f.starts, 1, "one refresh back")
				require.Equal(t, "1", aws.ToString(f.starts[0].DesiredConfiguration.LaunchTemplate.Version))
				require.Zero(t, f.rollbacks, "RollbackInstanceRefresh does not act on a Failed refresh")
			}},
		{from: pos(state.PhaseReplacing, state.StepInstanceRefresh), to: pos(state.PhaseHalted, state.StepInstanceRefresh), why: "Failed, no rollback",
			setup: func(rg *rig) model.Inputs {
				rg.o.Policy.RollbackOnFailure = false
				return inRefresh(astypes.InstanceRefreshStatusFailed, nil)(rg)
			}},
		{from: pos(state.PhaseRollingBack, state.StepInstanceRefresh), to: pos(state.PhaseRolledBack, ""), why: "RollbackSuccessful",
			setup: inRefresh(astypes.InstanceRefreshStatusRollbackSuccessful, func(r *state.Rollout) {
				r.Phase, r.Refresh.Rollback, r.Refresh.ByAPI, r.Refresh.Halt = state.PhaseRollingBack, true, true, "alarm"
			}),
			check: func(t *testing.T, _ *rig, stored state.Rollout) { require.Equal(t, amiNew, stored.RollbackFrom) }},
		{from: pos(state.PhaseRollingBack, state.StepInstanceRefresh), to: pos(state.PhaseHalted, state.StepInstanceRefresh), why: "RollbackFailed",
			setup: inRefresh(astypes.InstanceRefreshStatusRollbackFailed, func(r *state.Rollout) {
				r.Phase, r.Refresh.Rollback, r.Refresh.ByAPI = state.PhaseRollingBack, true, true
			})},
	}
	for i := range cases {
		setup := cases[i].setup
		cases[i].setup = func(rg *rig) model.Inputs {
			f := &fakeRefreshes{now: rg.clock.Now}
			rg.o.AutoScaling, rg.target.Policy.Strategy = f, model.StrategyRefresh
			return setup(rg)
		}
	}
	return cases
}

// The preferences of the refresh are explicit: launch before terminate, the batch above 100 %, SkipMatching,
// the explicit version, Wait for protected and Standby instances, no AutoRollback, at most 10 alarms.
func TestRefreshStartsWithExplicitPreferencesAndTheExplicitVersion(t *testing.T) {
	rg, f := refreshRig()
	rg.target.Policy.BatchSize = model.BatchSize{Count: 3}
	for i := range 12 {
		rg.target.Policy.Alarms = append(rg.target.Policy.Alarms, fmt.Sprintf("alarm-%d", i))
	}
	rg.o.Alarms = fakeAlarms{}
	rg.seed0(state.Rollout{Phase: state.PhasePreparing, Strategy: model.StrategyRefresh, TargetImageID: amiNew, PreviousImageID: amiOld,
		PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "$Default"}, Refresh: &state.RefreshProgress{LaunchingHook: "patch-agent-launch"}})
	v := view(10, false)
	v.Max = 13
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	require.Len(t, f.starts, 1)
	in := f.starts[0]
	require.Equal(t, "2", aws.ToString(in.DesiredConfiguration.LaunchTemplate.Version), "version N, never $Latest or $Default")
	p := in.Preferences
	require.Equal(t, int32(100), aws.ToInt32(p.MinHealthyPercentage))
	require.Equal(t, int32(130), aws.ToInt32(p.MaxHealthyPercentage), "100 + ceil(100 x 3 / 10)")
	require.True(t, aws.ToBool(p.SkipMatching))
	require.NotNil(t, p.AutoRollback)
	require.False(t, *p.AutoRollback)
	require.Equal(t, astypes.ScaleInProtectedInstancesWait, p.ScaleInProtectedInstances)
	require.Equal(t, astypes.StandbyInstancesWait, p.StandbyInstances)
	require.Len(t, p.AlarmSpecification.Alarms, 10)
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, "1", stored.Refresh.PreviousVersion, "$Default resolved to the explicit version for rollback")
	require.Equal(t, int32(3), stored.Refresh.BatchSize)
	require.Equal(t, "instance refresh "+stored.Refresh.ID+" Pending: 0% complete, 0 instance(s) to update", stored.Reason,
		"status says which refresh runs from the write that records its start")
}

func TestMaxHealthyPercentageIsTheBatchAboveDesiredRoundedUp(t *testing.T) {
	for _, c := range []struct {
		batch   int
		desired int32
		want    int32
	}{{1, 10, 110}, {3, 10, 130}, {1, 3, 134}, {1, 1, 200}, {5, 2, 200}, {1, 0, 200}} {
		require.Equal(t, c.want, maxHealthyPercentage(c.batch, c.desired), "batch %d of %d", c.batch, c.desired)
	}
}

// C27: after a crash that lost StartInstanceRefresh's answer, the active refresh naming the recorded version is
// adopted; no second refresh starts.
func TestRefreshWhoseAnswerWasLostIsAdoptedNotStartedTwice(t *testing.T) {
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-9", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-30*time.Second))}
	rg.seed0(refreshing(""))
	for range 2 {
		_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
		require.NoError(t, err)
	}
	require.Empty(t, f.starts, "no second refresh")
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, "ir-9", stored.Refresh.ID)
	require.Contains(t, stored.Reason, "ir-9 InProgress: 40% complete, 3 instance(s) to update")
}

// C27: a refresh someone else started holds the group: the rollout waits, names it, and never cancels it.
func TestForeignRefreshIsWaitedForAndNeverCancelled(t *testing.T) {
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-theirs", "7", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Hour))}
	rg.seed0(refreshing(""))
	for range 3 {
		_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
		require.NoError(t, err)
		rg.clock.Step(time.Minute)
	}
	require.Empty(t, f.starts)
	require.Zero(t, f.cancels, "a refresh the agent did not start is never cancelled")
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseWaiting, stored.Phase)
	require.Contains(t, stored.Reason, "instance refresh ir-theirs (InProgress")
	require.Contains(t, stored.Reason, "not started by patch-agent")
	f.refreshes[0].Status = astypes.InstanceRefreshStatusSuccessful
	_, err = rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	require.Len(t, f.starts, 1, "once it ended, the agent's own refresh starts")
	require.Zero(t, f.cancels)
}

// A pause cancels the agent's refresh in progress (the reason is written before the call); a new refresh
// starts only after the pause and through the gates.
func TestPauseCancelsTheAgentsRefresh(t *testing.T) {
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
	rg.seed0(refreshing("ir-1"))
	pause := &state.Lock{Group: "prod", Who: "ops", Reason: "incident", Since: now0}
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
	require.NoError(t, err)
	require.Equal(t, 1, f.cancels)
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Contains(t, stored.Refresh.Cancel, "paused")
	f.refreshes[0].Status = astypes.InstanceRefreshStatusCancelled
	_, err = rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
	require.NoError(t, err)
	stored, err = rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseWaiting, stored.Phase)
	require.Empty(t, f.starts, "nothing starts while paused")
}

// lookAtALeavingLaunch seeds prod's refresh ir-1 in progress and the launching action record rec of an
// instance leaving the group (Terminating:Wait) on image, launched after the refresh started, takes one look,
// and returns the refreshes fake and the stored rollout.
func lookAtALeavingLaunch(t *testing.T, rec state.Hook, image string) (*fakeRefreshes, state.Rollout) {
	t.Helper()
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
	rg.seed0(refreshing("ir-1"))
	ctx := context.Background()
	rec.Token, rec.Group, rec.HookName, rec.State = model.ActionKey("prod", rec.InstanceID, "patch-agent-launch"), "prod", "patch-agent-launch", state.HookCompleted
	_, err := rg.store.PutHook(ctx, rec)
	require.NoError(t, err)
	// EC2's launch time is the last start: for an instance from the warm pool, after the refresh began.
	v := oldFleet()
	v.Instances = append(v.Instances, model.InstanceView{ID: rec.InstanceID, LifecycleState: string(astypes.LifecycleStateTerminatingWait), ImageID: image, LaunchTime: now0})
	_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	return f, stored
}

// The first ABANDON of the agent's launching hook halts the refresh at once and rolls it back with
// RollbackInstanceRefresh (it is still in progress). The record tells it by its Result, or — when the agent
// died right after Auto Scaling accepted the ABANDON and the next incarnation's call found no active action —
// by the verdict it wrote before the call (Decided), with no Result.
func TestAbandonedLaunchHaltsAndRollsBackAtOnce(t *testing.T) {
	for _, c := range []struct {
		name            string
		result, decided string
	}{
		{"completed with ABANDON", model.ResultAbandon, model.ResultAbandon},
		{"ABANDON decided, its record lost in a crash", "", model.ResultAbandon},
	} {
		t.Run(c.name, func(t *testing.T) {
			f, stored := lookAtALeavingLaunch(t, state.Hook{InstanceID: "i-7", Result: c.result, Decided: c.decided,
				Note: "not healthy in cluster after 10m0s"}, amiNew)
			require.Equal(t, 1, f.rollbacks)
			require.Equal(t, state.PhaseRollingBack, stored.Phase)
			require.Contains(t, stored.Reason, "i-7")
			require.Contains(t, stored.Refresh.Halt, "ABANDON")
		})
	}
}

// A launch the agent completed with CONTINUE whose record lost its Result the same way (Decided CONTINUE) halts
// nothing.
func TestContinuedLaunchWithoutAResultDoesNotHaltTheRefresh(t *testing.T) {
	f, stored := lookAtALeavingLaunch(t, state.Hook{InstanceID: "i-7", Decided: model.ResultContinue}, amiNew)
	require.Zero(t, f.rollbacks)
	require.Equal(t, state.PhaseReplacing, stored.Phase, stored.Reason)
}

// An ABANDON of an instance on another AMI than the target (the agent's own abandon of an old-AMI instance a
// scale out drew from the warm pool) is no failed replacement: the refresh goes on.
func TestAbandonedLaunchOfAnOldAMIFromTheWarmPoolDoesNotHaltTheRefresh(t *testing.T) {
	f, stored := lookAtALeavingLaunch(t, state.Hook{InstanceID: "i-8", Result: model.ResultAbandon,
		Note: "from the warm pool on " + amiOld}, amiOld)
	require.Zero(t, f.rollbacks)
	require.Equal(t, state.PhaseReplacing, stored.Phase, stored.Reason)
	require.Empty(t, stored.Refresh.Halt)
}

// Where Auto Scaling refuses RollbackInstanceRefresh, the refresh is cancelled and a refresh of the agent's own
// goes back to the previous version.
func TestIrreversibleRefreshIsCancelledThenRefreshedBack(t *testing.T) {
	rg, f := refreshRig()
	f.rollbackErr = &astypes.IrreversibleInstanceRefreshFault{Message: aws.String("$Default")}
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
	rec := refreshing("ir-1")
	rec.Phase, rec.Refresh.Rollback, rec.Refresh.ByAPI, rec.Refresh.RequestedBy = state.PhaseRollingBack, true, true, "ops"
	rg.seed0(rec)
	ctx := context.Background()
	_, err := rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	require.Equal(t, 1, f.cancels)
	f.refreshes[0].Status = astypes.InstanceRefreshStatusCancelled
	rg.clock.Step(time.Minute)
	_, err = rg.o.Reconcile(ctx, rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	require.Len(t, f.starts, 1)
	require.Equal(t, "1", aws.ToString(f.starts[0].DesiredConfiguration.LaunchTemplate.Version))
}

// A group at its MaxSize waits and says so: the agent never raises MaxSize.
func TestRefreshAtMaxSizeSaysSo(t *testing.T) {
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
	rg.seed0(refreshing("ir-1"))
	v := oldFleet()
	v.Max = 3
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Contains(t, stored.Reason, "at its MaxSize (3)")
	require.Empty(t, groupWrites(rg))
}

// A refresh group without the agent's launching hook is not rolled: status names the hook and the command. A
// plain group without a patch-agent/strategy tag is a refresh group.
func TestRefreshGroupWithoutLaunchingHookWaitsWithTheCommand(t *testing.T) {
	for _, tag := range []string{model.StrategyRefresh, "", "auto"} {
		t.Run("strategy="+tag, func(t *testing.T) {
			rg, f := refreshRig()
			rg.target.Policy.Strategy = tag
			f.hooks = f.hooks[1:]
			rg.seed0(state.Rollout{Phase: state.PhaseDetected, TargetImageID: amiNew, PreviousImageID: amiOld, SourceModified: now0.Add(-48 * time.Hour)})
			_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
			require.NoError(t, err)
			stored, err := rg.store.GetRollout(context.Background(), "prod")
			require.NoError(t, err)
			require.Equal(t, state.PhaseWaiting, stored.Phase)
			require.Contains(t, stored.Reason, "no launching lifecycle hook")
			require.Contains(t, stored.Reason, "aws autoscaling put-lifecycle-hook --auto-scaling-group-name prod --lifecycle-hook-name patch-agent-launch")
			require.Empty(t, f.starts)
			require.Empty(t, groupWrites(rg), "no desired capacity written either")
		})
	}
}

// A refresh that succeeded before the cancel of a halt reached it (an alarm fired in its last minutes) is
// rolled back by a refresh to the previous version, not completed.
func TestRefreshThatSucceededAfterTheHaltIsRolledBack(t *testing.T) {
	rg, f := refreshRig()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusSuccessful, now0.Add(-time.Minute))}
	rec := refreshing("ir-1")
	rec.Refresh.Halt, rec.Refresh.Cancel = "alarm(s) p99 in ALARM", "halted: alarm(s) p99 in ALARM"
	rg.seed0(rec)
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	require.Equal(t, state.PhaseRollingBack, stored.Phase)
	require.Len(t, f.starts, 1)
	require.Equal(t, "1", aws.ToString(f.starts[0].DesiredConfiguration.LaunchTemplate.Version))
}

// A group tagged patch-agent/lifecycle-hooks with only the terminating hook (as groups that scoped the agent's
// hooks before it needed a launching one are) is not rolled, and the reason says the launching hook exists but
// the tag leaves it out; with the tag listing both, the group is rolled.
func TestRefreshHooksNamesTheTagThatLeavesTheLaunchingHookOut(t *testing.T) {
	hooks := []model.GroupHook{{Name: "patch-agent-drain", Transition: model.TransitionTerminating}, {Name: "patch-agent-launch", Transition: model.TransitionLaunching}}
	queue := "https://sqs.us-east-1.amazonaws.com/123456789012/patch-agent"
	launching, terminating, missing := model.RefreshHooks("web", hooks, model.HookOwnership{QueueURL: queue, Listed: []string{"patch-agent-drain"}})
	require.Empty(t, launching)
	require.Equal(t, "patch-agent-drain", terminating)
	require.Contains(t, missing, `no launching lifecycle hook of the agent's (new instances would count as healthy before they serve) (hook "patch-agent-launch" is not listed in the group's tag patch-agent/lifecycle-hooks=patch-agent-drain)`)
	require.NotContains(t, missing, "no terminating lifecycle hook")

	launching, terminating, missing = model.RefreshHooks("web", hooks, model.HookOwnership{QueueURL: queue, Listed: []string{"patch-agent-drain", "patch-agent-launch"}})
	require.Equal(t, "patch-agent-launch", launching)
	require.Equal(t, "patch-agent-drain", terminating)
	require.Empty(t, missing)
}
