package model

import (
	"fmt"
	"strconv"
	"strings"
)

// TagBatchSize is how many outdated instances of a group one instance refresh replaces at once (its
// MaxHealthyPercentage, engine/rollout_refresh.go): a whole number ("3") or a percent of the group's desired capacity
// ("25%", rounded up, at least 1). Default 1. The per-cluster budget (--cluster-budget) still caps how many of a
// batch drain at once: a terminating action over the budget is heartbeated until a slot frees.
const TagBatchSize = "patch-agent/batch-size"

// BatchSize is a parsed TagBatchSize: Count instances, or Percent of desired capacity when Percent > 0. The
// zero value is a batch of 1.
type BatchSize struct {
	Count   int `json:"count,omitempty"`
	Percent int `json:"percent,omitempty"`
}

// ParseBatchSize reads TagBatchSize: "" (a batch of 1), a whole number from 1, or a percent from 1% to 100%.
// Anything else ("0", "-2", "1.5", "150%", "three") is an error naming the tag and the value, so the group is
// reported misconfigured on status rather than rolled with a guess.
func ParseBatchSize(v string) (BatchSize, error) {
	if v == "" {
		return BatchSize{}, nil
	}
	if num, ok := strings.CutSuffix(v, "%"); ok {
		p, err := strconv.Atoi(num)
		if err != nil || p < 1 || p > 100 {
			return BatchSize{}, fmt.Errorf("tag %s=%q: want a whole number from 1, or a percent of desired capacity from 1%% to 100%%", TagBatchSize, v)
		}
		return BatchSize{Percent: p}, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return BatchSize{}, fmt.Errorf("tag %s=%q: want a whole number from 1, or a percent of desired capacity from 1%% to 100%%", TagBatchSize, v)
	}
	return BatchSize{Count: n}, nil
}

// Of returns the batch size for a group of desired capacity desired: Count, or Percent of desired rounded up;
// at least 1.
func (b BatchSize) Of(desired int32) int {
	n := b.Count
	if b.Percent > 0 {
		n = (int(desired)*b.Percent + 99) / 100
	}
	return max(n, 1)
}

// String renders the tag value ("" for the default).
func (b BatchSize) String() string {
	switch {
	case b.Percent > 0:
		return strconv.Itoa(b.Percent) + "%"
	case b.Count > 0:
		return strconv.Itoa(b.Count)
	}
	return ""
}
