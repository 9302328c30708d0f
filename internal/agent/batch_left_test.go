package agent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/patch-agent/patch-agent/internal/demo"
	"github.com/patch-agent/patch-agent/internal/lifecycle"
	"github.com/patch-agent/patch-agent/internal/state"
)

// A batch of 2 on a group of 2 (DesiredBefore 2, surge to 4). While both members drain, member A's old instance
// fails its health check and leaves; Auto Scaling launches its health replacement at once, which does not serve
// yet when the rollout sees A gone. retireLeftOfBatch finds nothing serving to carry A's share of the surge to
// and retires A plainly: its share stays in desired capacity, and member B counts it in its baseline, so B's
// termination still gives back B's own share: desired ends at 3. Without that, B's termination would see
// desired 4 > DesiredBefore 2 + 1 in flight, take it for another actor's scale out and keep the whole surge
// (4). The left-behind share (3, not 2) is the documented cost of having nothing to carry it to.
func TestBatchMemberLeftWithNothingToCarryToStillGivesBackTheOthersShares(t *testing.T) {
	ctx := context.Background()
	g := demo.GroupSetup{Name: "g", Cluster: "c1", Parameter: "/golden/g", Min: 1, Max: 8, Desired: 2,
		Tags: map[string]string{lifecycle.TagBatchSize: "2"}}
	policy := lifecycle.DefaultPolicy()
	policy.ClusterBudget = 2
	w := build(t, demo.Spec{Groups: []demo.GroupSetup{g}, Services: map[string]int{"web": 4}, Policy: policy})
	settle(t, w, 10*time.Second)
	w.PublishAMI(g.Parameter, demo.ImageB)
	done, err := w.RunUntil(ctx, tick, time.Hour, func() bool {
		r := w.Rollout(ctx, g.Name)
		return r.Current != nil && len(r.Batch) == 1 && r.Current.Step == state.StepDraining && r.Batch[0].Step == state.StepDraining
	})
	require.NoError(t, err)
	require.True(t, done, "%+v", w.Rollout(ctx, g.Name))
	r := w.Rollout(ctx, g.Name)
	t.Logf("batch draining: current %s (new %s), peer %s (new %s); desired %d", r.Current.OldInstanceID, r.Current.NewInstanceID,
		r.Batch[0].OldInstanceID, r.Batch[0].NewInstanceID, w.Account.Group(g.Name).Desired)
	require.True(t, w.Account.MarkInstanceUnhealthy(r.Current.OldInstanceID))
	tr := &rolloutTrace{}
	done, err = w.RunUntil(ctx, tick, 3*time.Hour, func() bool { tr.look(t, w, g.Name); return !w.Rollout(ctx, g.Name).Active() })
	require.NoError(t, err)
	require.True(t, done)
	settle(t, w, 10*time.Minute)
	t.Logf("rollout %s: %s", w.Rollout(ctx, g.Name).Phase, w.Rollout(ctx, g.Name).Reason)
	v := logDesired(t, w, g.Name)
	require.Equal(t, int32(3), w.Account.Group(g.Name).Desired, "B's share given back; A's, with nothing to carry it to, stays")
	require.Empty(t, v)
}

// rolloutTrace logs the rollout's members and their old instances' states whenever they change.
type rolloutTrace struct{ last string }

func (tr *rolloutTrace) look(t *testing.T, w *demo.World, group string) {
	ctx := context.Background()
	r := w.Rollout(ctx, group)
	s := string(r.Phase)
	if r.Current != nil {
		for _, m := range append([]state.Replacement{*r.Current}, r.Batch...) {
			st := "gone"
			if i, ok := w.Account.Instance(m.OldInstanceID); ok {
				st = i.LifecycleState
			}
			s += " | " + m.OldInstanceID + " " + string(m.Step) + " (" + st + ")"
		}
	}
	s += " | desired " + fmt.Sprint(w.Account.Group(group).Desired)
	if s != tr.last {
		t.Logf("%s %s", w.Account.Clock().Now().Format(time.TimeOnly), s)
		tr.last = s
	}
}
