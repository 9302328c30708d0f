package engine

import (
	"context"
	"testing"
	"time"

	astypes "github.com/aws/aws-sdk-go-v2/service/autoscaling/types"
	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/state"
)

// someoneElsesRefreshAfterOurs seeds prod's refresh ir-1 in progress, takes one look that remembers it
// (RefreshMemo), then has someone cancel ir-1 and start a refresh of their own (ir-theirs) before any instance
// of the group moves: CancelInstanceRefresh and RollbackInstanceRefresh name no refresh, they act on the
// group's active one.
func someoneElsesRefreshAfterOurs(t *testing.T) (*rig, *fakeRefreshes) {
	t.Helper()
	rg, f := refreshRig()
	rg.o.RefreshMemo = NewRefreshMemo()
	f.refreshes = []astypes.InstanceRefresh{refreshNaming("ir-1", "2", astypes.InstanceRefreshStatusInProgress, now0.Add(-time.Minute))}
	rg.seed0(refreshing("ir-1"))
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	f.refreshes[0].Status = astypes.InstanceRefreshStatusCancelled
	f.refreshes = append(f.refreshes, refreshNaming("ir-theirs", "7", astypes.InstanceRefreshStatusPending, now0.Add(20*time.Second)))
	rg.clock.Step(30 * time.Second)
	return rg, f
}

// A pause seen while the agent's refresh is remembered in progress never cancels a refresh someone else started
// after cancelling the agent's.
func TestPauseNeverCancelsARefreshSomeoneStartedAfterCancellingTheAgents(t *testing.T) {
	rg, f := someoneElsesRefreshAfterOurs(t)
	pause := &state.Lock{Group: "prod", Who: "ops", Reason: "incident", Since: now0}
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI(), Pause: pause})
	require.NoError(t, err)
	require.Zero(t, f.cancels, "ir-theirs is not the agent's: never cancelled")
	require.Equal(t, astypes.InstanceRefreshStatusPending, f.refreshes[1].Status)
}

// An alarm seen while the agent's refresh is remembered in progress never rolls back a refresh someone else
// started after cancelling the agent's.
func TestAlarmNeverRollsBackARefreshSomeoneStartedAfterCancellingTheAgents(t *testing.T) {
	rg, f := someoneElsesRefreshAfterOurs(t)
	rg.target.Policy.Alarms = []string{"5xx"}
	rg.o.Alarms = firingAlarms{"5xx"}
	_, err := rg.o.Reconcile(context.Background(), rg.target, model.Inputs{View: oldFleet(), AMI: newAMI()})
	require.NoError(t, err)
	require.Zero(t, f.rollbacks, "ir-theirs is not the agent's: never rolled back")
	require.Zero(t, f.cancels, "ir-theirs is not the agent's: never cancelled")
	require.Equal(t, astypes.InstanceRefreshStatusPending, f.refreshes[1].Status)
}

// firingAlarms has its alarms in ALARM.
type firingAlarms []string

func (a firingAlarms) InAlarm(context.Context, []string) ([]string, error) { return a, nil }
