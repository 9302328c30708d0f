package audit

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ParseAge reads an age such as the --fail-if-behind threshold: a whole number of days ("30d") or a Go
// duration ("720h", "36h30m"). It returns an error for anything else and for a negative age.
func ParseAge(s string) (time.Duration, error) {
	v := strings.TrimSpace(s)
	if days, ok := strings.CutSuffix(v, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a number of days (like 30d) or a duration (like 720h)", s)
		}
		return time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number of days (like 30d) or a duration (like 720h)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is negative", s)
	}
	return d, nil
}
