package lifecycleaction

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/patch-agent/patch-agent/internal/model"
	"github.com/patch-agent/patch-agent/internal/providers"
	"github.com/stretchr/testify/require"
)

func TestHookGlobalTimeoutAndTheDrainLimitItAllows(t *testing.T) {
	for _, tc := range []struct {
		name              string
		heartbeat         time.Duration
		global            *int32
		wantGlobal, limit time.Duration
	}{
		{"100 x heartbeat", time.Minute, nil, 100 * time.Minute, 90 * time.Minute},
		{"at most 48 h", 3 * time.Hour, nil, 48 * time.Hour, 48*time.Hour - 30*time.Minute},
		{"as DescribeLifecycleHooks reports it", time.Hour, aws.Int32(7200), 2 * time.Hour, 108 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := providers.HookGlobalTimeout(tc.heartbeat, tc.global)
			require.Equal(t, tc.wantGlobal, g)
			require.Equal(t, tc.limit, providers.HookDrainLimit(g))
		})
	}
}

func TestCheckHooksNotesEveryTerminatingHookTooShortForTheDrainTimeout(t *testing.T) {
	hook := func(name, transition string, heartbeat int32) model.GroupHook {
		return model.GroupHook{Name: name, Transition: transition, HeartbeatTimeout: time.Duration(heartbeat) * time.Second}
	}
	const term, launch = "autoscaling:EC2_INSTANCE_TERMINATING", "autoscaling:EC2_INSTANCE_LAUNCHING"
	c := checkHooks([]model.GroupHook{hook("short", term, 60), hook("long", term, 3600), hook("boot", launch, 60)}, 3*time.Hour)
	require.Empty(t, c.Missing)
	require.Len(t, c.Capped, 1, "only the terminating hook whose global timeout (100 min) is below 3 h")
	require.Contains(t, c.Capped[0], "lifecycle hook short allows (global timeout 1h40m0s")
	require.Contains(t, c.Capped[0], "its drains end at 1h30m0s")
	// 3 h of drain needs a global timeout of 3h20m (a tenth kept): a HeartbeatTimeout of 120 s.
	require.Contains(t, c.Capped[0], "raise its HeartbeatTimeout to at least 2m0s")
	require.Equal(t, 3*time.Hour, providers.HookDrainLimit(providers.HookGlobalTimeout(neededHeartbeat(3*time.Hour), nil)))
	require.Empty(t, checkHooks([]model.GroupHook{hook("long", term, 3600)}, 3*time.Hour).Note())
	require.Equal(t, missingHookNote, checkHooks(nil, 3*time.Hour).Note())
}
