package model

import (
	"fmt"
	"strconv"
	"time"
)

// A canary rolls the first instances of a rollout by instance refresh alone, then bakes them under the
// target's alarms before the rest is replaced, through the refresh's own checkpoint (Amazon EC2 Auto Scaling
// User Guide, "Add checkpoints to an instance refresh"; API Reference, RefreshPreferences:
// CheckpointPercentages, CheckpointDelay, AlarmSpecification). The first refresh of the rollout stops at the
// canary's share of the group (a last checkpoint below 100 ends the refresh there after its delay); an alarm of
// the target in ALARM during the bake fails it, and the agent halts and rolls back. Once it ended Successful, a
// second refresh, without a checkpoint, replaces the rest (verifyRefresh).
const (
	// TagCanary is how many instances the canary replaces first: a whole number from 1. A canary as large as
	// the group is no canary: the refresh then replaces everything at once.
	TagCanary = "patch-agent/canary"
	// TagCanaryBake is how long the canary bakes before the rest is replaced: a Go duration from 1m to 48h
	// (CheckpointDelay: at most 172,800 seconds). Default DefaultCanaryBake.
	TagCanaryBake = "patch-agent/canary-bake"
)

// DefaultCanaryBake is the bake of a canary whose TagCanaryBake is not set.
const DefaultCanaryBake = 30 * time.Minute

// ParseCanary reads the canary tags: the number of instances (0 when TagCanary is not set) and the bake.
// Errors name the tag and the accepted values; a bake without a canary is an error too.
func ParseCanary(count, bake string) (int, time.Duration, error) {
	if count == "" {
		if bake != "" {
			return 0, 0, fmt.Errorf("tag %s=%q needs %s: how many instances the canary replaces first", TagCanaryBake, bake, TagCanary)
		}
		return 0, 0, nil
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 {
		return 0, 0, fmt.Errorf("tag %s=%q: want a whole number of instances from 1", TagCanary, count)
	}
	d := DefaultCanaryBake
	if bake != "" {
		if d, err = time.ParseDuration(bake); err != nil || d < time.Minute || d > 48*time.Hour {
			return 0, 0, fmt.Errorf("tag %s=%q: want a duration from 1m to 48h (e.g. 30m, 2h)", TagCanaryBake, bake)
		}
	}
	return n, d, nil
}

// canaryCheckpoint is the checkpoint of a canary of n instances in a group of desired capacity desired: the
// percentage of the group the first refresh replaces before it bakes (rounded up, so that the canary's
// instances are all replaced; at most 99), or 0 when there is no canary (n 0, or n covering the group).
func CanaryCheckpoint(n int, desired int32) int32 {
	if n < 1 || desired < 1 || int32(n) >= desired {
		return 0
	}
	return min(99, int32((100*n+int(desired)-1)/int(desired)))
}
