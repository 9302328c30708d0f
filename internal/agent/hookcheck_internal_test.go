package agent

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The per-pass bound rises with the fleet so that every group is checked within about PollInterval +
// ReconcileInterval: ceil(N × ReconcileInterval / PollInterval) when that is above the setting.
func TestHookChecksPerPassCoversTheFleetWithinThePollInterval(t *testing.T) {
	for _, tc := range []struct {
		name            string
		groups, setting int
		reconcile, poll time.Duration
		want            int
	}{
		{name: "1,000 groups at the 15 s tick: 25 a pass, 40 passes = 10 min", groups: 1000, reconcile: 15 * time.Second, poll: 10 * time.Minute, want: 25},
		{name: "1,000 groups at the 2 min safety poll: raised to 200", groups: 1000, reconcile: 2 * time.Minute, poll: 10 * time.Minute, want: 200},
		{name: "a small fleet: the setting", groups: 3, setting: 10, reconcile: 15 * time.Second, poll: 10 * time.Minute, want: 10},
		{name: "poll shorter than the tick: every group every pass", groups: 40, reconcile: time.Minute, poll: 30 * time.Second, want: 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Agent{settings: Settings{HookChecksPerPass: tc.setting, ReconcileInterval: tc.reconcile, PollInterval: tc.poll}}
			require.Equal(t, tc.want, a.hookChecksPerPass(tc.groups))
		})
	}
}
