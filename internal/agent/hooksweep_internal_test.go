package agent

import (
	"testing"
	"time"

	"github.com/patch-agent/patch-agent/internal/lifecycleaction"
	"github.com/stretchr/testify/require"
)

// Field case C4, the lifecycle sweep's cadence: for every HeartbeatTimeout Auto Scaling allows (30 s to 2 h),
// an action whose message is lost is first seen within one sweep interval of its start and taken up at the
// first look lifecycleaction.AdoptAfter after that, which comes within one more interval (an early sweep only
// shortens an interval). That worst case leaves at least a third of the timeout. A sweep every 20 s or a third
// of the timeout would not: at 60 s its worst case takes the action up as its timeout runs out.
func TestC4LifecycleSweepTakesUpALostActionWithAThirdOfItsTimeoutToSpare(t *testing.T) {
	for hb := 30 * time.Second; hb <= 2*time.Hour; hb += time.Second {
		var s hookSweep
		s.note("g", hb)
		_, every, _ := s.plan()
		require.LessOrEqual(t, every, maxSweepInterval, "a cached timeout never stretches the sweep (%s)", hb)
		worst := 2*every + lifecycleaction.AdoptAfter(hb)
		require.LessOrEqual(t, worst, 2*hb/3, "HeartbeatTimeout %s: swept every %s, taken up by %s", hb, every, worst)
		// Once taken up, each heartbeat is due a third of the timeout after the last, sent within an interval.
		require.Less(t, hb/3+every, hb)
	}
	var s hookSweep
	s.note("slow", 10*time.Minute)
	s.note("fast", time.Minute)
	_, every, _ := s.plan()
	require.Equal(t, 10*time.Second, every, "the shortest timeout of the swept groups sets the pace")
}
