package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
)

// MaxNameLen is the longest name UniqueName returns: within the limits of EventBridge rule names (64), SQS
// queue names (80, leaving room for ".fifo"), DynamoDB table names (255) and SSM parameter path segments.
const MaxNameLen = 64

// UniqueName returns a resource name for this test on the shared kumo: prefix, the test's name and 8 random
// hex digits, joined by "-", using only [A-Za-z0-9-] and at most MaxNameLen characters (the test's name is
// shortened to fit). Two calls never return the same name.
func UniqueName(t testing.TB, prefix string) string {
	t.Helper()
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("random name suffix: %v", err)
	}
	suffix := hex.EncodeToString(b[:])
	prefix = sanitize(prefix)
	room := MaxNameLen - len(suffix) - 1
	if prefix != "" {
		prefix = truncate(prefix, room-1)
		room -= len(prefix) + 1
	}
	parts := []string{}
	if prefix != "" {
		parts = append(parts, prefix)
	}
	if name := truncate(sanitize(t.Name()), room-1); name != "" && room > 1 {
		parts = append(parts, name)
	}
	return strings.Join(append(parts, suffix), "-")
}

// sanitize maps every run of characters outside [A-Za-z0-9] to one "-" and trims dashes at both ends.
func sanitize(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
			b.WriteRune(r)
			dash = false
		case !dash:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.Trim(b.String(), "-")
}

func truncate(s string, n int) string {
	if n <= 0 {
		return ""
	}
	if len(s) > n {
		s = s[:n]
	}
	return strings.TrimRight(s, "-")
}
