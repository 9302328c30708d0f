package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// SeedsEnv names the environment variable that sets the seeds of the long randomized runs (the fault matrix's
// 20 % fault seeds, the seeded other writers of desired capacity): "N" for seeds 1..N, "A-B" for A..B, or a
// comma-separated list. Unset, a test runs its short form, the few seeds it passes to Seeds; `make soak` sets
// it for the long form. Both forms run the same test code.
const SeedsEnv = "PATCH_AGENT_SEEDS"

// SoakSeeds is the number of seeds from which a run counts as the long form (Soak): enough for statistics over
// the seeds, such as the fault matrix's ratio of successful calls, to be asserted.
const SoakSeeds = 10

// Seeds returns the seeds a randomized test runs: those of $PATCH_AGENT_SEEDS, or short when it is unset. A
// malformed value fails the test.
func Seeds(t testing.TB, short []uint64) []uint64 {
	t.Helper()
	seeds, err := ParseSeeds(os.Getenv(SeedsEnv))
	if err != nil {
		t.Fatalf("%s: %v", SeedsEnv, err)
	}
	if seeds == nil {
		return short
	}
	return seeds
}

// Soak reports whether the seeds are the long form's: at least SoakSeeds of them.
func Soak(seeds []uint64) bool { return len(seeds) >= SoakSeeds }

// ParseSeeds parses a $PATCH_AGENT_SEEDS value ("" gives nil).
func ParseSeeds(v string) ([]uint64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return nil, nil
	}
	if lo, hi, ok := strings.Cut(v, "-"); ok {
		a, err1 := strconv.ParseUint(lo, 10, 64)
		b, err2 := strconv.ParseUint(hi, 10, 64)
		if err1 != nil || err2 != nil || a == 0 || b < a {
			return nil, fmt.Errorf("%q is not a range A-B of seeds from 1", v)
		}
		var s []uint64
		for i := a; i <= b; i++ {
			s = append(s, i)
		}
		return s, nil
	}
	if !strings.Contains(v, ",") {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q is not a count of seeds (N), a range (A-B) or a list (1,5,9)", v)
		}
		return ParseSeeds(fmt.Sprintf("1-%d", n))
	}
	var s []uint64
	seen := map[uint64]bool{}
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.ParseUint(strings.TrimSpace(f), 10, 64)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("%q is not a list of seeds from 1 (1,5,9)", v)
		}
		if seen[n] {
			return nil, fmt.Errorf("%q names seed %d twice: each seed is one run", v, n)
		}
		seen[n] = true
		s = append(s, n)
	}
	return s, nil
}
