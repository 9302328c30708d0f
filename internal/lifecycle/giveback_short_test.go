package lifecycle

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/state"
)

// The give-back of a halted batch's surge (3 instances owed, desired 4) finds only two instances to give it
// back through: i-3 and i-4, on the target AMI, do not serve. The two that do are drained with the surge's
// remainder counted in their baseline (DesiredBefore 4 - 2), so each of their terminations still decrements;
// with the baseline of the whole surge (4 - 3 = 1) desired capacity 4 would read as another actor's scale out
// above 1 + 2 in flight (surgeTakenOver) and nothing would be given back.
func TestGiveBackThroughFewerInstancesThanTheHaltedSurgeStillDecrements(t *testing.T) {
	ctx := context.Background()
	rg := newRig()
	rec := replacing(StrategySurge, state.StepSurge)
	rec.Current = nil
	rec.HaltedSurgeTo, rec.HaltedSurgeCount = 4, 3
	rg.seed0(rec)
	unhealthy := func(id string) InstanceView {
		i := serving(id, amiNew)
		i.Node.Healthy = false
		return i
	}
	v := view(4, false, serving("i-1", amiOld), serving("i-2", amiOld), unhealthy("i-3"), unhealthy("i-4"))
	_, err := rg.o.Reconcile(ctx, rg.target, Inputs{View: v, AMI: newAMI()})
	require.NoError(t, err)
	stored, err := rg.store.GetRollout(ctx, "prod")
	require.NoError(t, err)
	require.NotNil(t, stored.Current, "%+v", stored)
	require.Equal(t, state.StepDraining, stored.Current.Step, stored.Reason)
	require.Len(t, stored.Batch, 1, "one peer: the other instances do not serve")
	require.Equal(t, int32(2), stored.Current.DesiredBefore)
	require.Equal(t, int32(2), stored.Batch[0].DesiredBefore)
	require.False(t, surgeTakenOver(stored, v), "the give-back's terminations decrement")
}
