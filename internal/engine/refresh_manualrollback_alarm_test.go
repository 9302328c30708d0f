package engine

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/patch-agent/patch-agent/internal/state"
)

// switchAlarms answers the alarms named in firing as in ALARM.
type switchAlarms struct{ firing []string }

func (a *switchAlarms) InAlarm(context.Context, []string) ([]string, error) { return a.firing, nil }

// completedOnNew is prod Completed on amiNew (launch template version 2) after a rollout from amiOld, with
// the alarm 5xx on the target, and an operator's `patch-agent rollback prod` recorded.
func completedOnNew(t *testing.T) (*rig, *fakeRefreshes, *switchAlarms) {
	t.Helper()
	ctx := context.Background()
	rg, f := refreshRig()
	alarms := &switchAlarms{}
	rg.target.Policy.Alarms, rg.o.Alarms = []string{"5xx"}, alarms
	rg.templates.current, rg.templates.created = providers.TemplateVersion{Number: 2, ImageID: amiNew}, 3
	rg.seed0(state.Rollout{Phase: state.PhaseCompleted, Strategy: model.StrategyRefresh, TargetImageID: amiNew, PreviousImageID: amiOld,
		Source: "/golden/ecs", SourceVersion: 2, NewTemplateVersion: "2", PreviousTemplate: &state.LaunchTemplateRef{ID: "lt-1", Version: "1"}})
	_, err := rg.store.PutRolloutWithHistory(ctx, mustGet(t, rg), []state.HistoryEntry{{Group: "prod", At: now0.Add(-time.Hour), Event: "completed",
		PreviousImage: amiOld, NewImage: amiNew}})
	require.NoError(t, err)
	_, err = operator.Rollback(ctx, rg.store, "prod", "", "alice", false, now0)
	require.NoError(t, err)
	return rg, f, alarms
}

func mustGet(t *testing.T, rg *rig) state.Rollout {
	t.Helper()
	r, err := rg.store.GetRollout(context.Background(), "prod")
	require.NoError(t, err)
	return r
}

// onNew is the group on amiNew, launch template version 2.
func onNew() model.GroupView {
	v := view(3, false, serving("i-4", amiNew), serving("i-5", amiNew), serving("i-6", amiNew))
	v.Group.LaunchTemplate.Version = aws.String("2")
	return v
}

// `patch-agent rollback` of a completed rollout whose AMI set off the target's alarm (it passed the health
// checks and broke the application: the case a rollback is for) is not held by that alarm: the refresh back
// to the previous AMI starts.
func TestManualRollbackIsNotHeldByTheAlarmItAnswers(t *testing.T) {
	rg, f, alarms := completedOnNew(t)
	alarms.firing = []string{"5xx"}
	stored := reconcileFor(t, rg, 5*time.Minute, func() model.Inputs { return model.Inputs{View: onNew(), AMI: newAMI()} })
	require.Len(t, f.starts, 1, "the rollback's refresh starts: %s %s", stored.Phase, stored.Reason)
	require.Equal(t, amiOld, stored.TargetImageID)
}

// The refresh of a manual rollback is not failed, halted and rolled back (onto the AMI the operator rolled
// away from) by the target's alarm going off while it runs.
func TestManualRollbacksRefreshIsNotRolledBackByTheAlarm(t *testing.T) {
	rg, f, alarms := completedOnNew(t)
	stored := reconcileFor(t, rg, 2*time.Minute, func() model.Inputs { return model.Inputs{View: onNew(), AMI: newAMI()} })
	require.Len(t, f.starts, 1, "%s %s", stored.Phase, stored.Reason)
	require.Nil(t, f.starts[0].Preferences.AlarmSpecification, "no alarm fails the rollback's refresh")
	f.refreshes[0].Status = astypes.InstanceRefreshStatusInProgress
	alarms.firing = []string{"5xx"}
	stored = reconcileFor(t, rg, 5*time.Minute, func() model.Inputs { return model.Inputs{View: onNew(), AMI: newAMI()} })
	require.Zero(t, f.rollbacks, "the rollback is not rolled back to %s", amiNew)
	require.Zero(t, f.cancels)
	require.Equal(t, state.PhaseReplacing, stored.Phase, stored.Reason)
}
