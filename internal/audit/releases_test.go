package audit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestReleasesAfter(t *testing.T) {
	day := func(d int) time.Time { return time.Date(2026, 1, d, 0, 0, 0, 0, time.UTC) }
	history := []historyVersion{
		{1, "ami-a", day(1)},
		{2, "ami-b", day(5)},
		{3, "ami-b", day(6)}, // same AMI again (metadata change): no release
		{4, "ami-c", day(10)},
		{5, "ami-d", day(20)},
	}
	created := func(d int) *time.Time { t := day(d); return &t }
	for _, tc := range []struct {
		name    string
		image   string
		created *time.Time
		want    int
	}{
		{"the AMI of the first version is three releases behind", "ami-a", nil, 3},
		{"the AMI a later version named again counts from its last version", "ami-b", created(1), 2},
		{"the latest AMI is none behind", "ami-d", nil, 0},
		{"an AMI from elsewhere counts the releases after its creation", "ami-x", created(7), 2},
		{"an AMI older than the history counts every release", "ami-x", created(0), 4},
		{"an AMI neither in the history nor dated is unknown", "ami-x", nil, Unknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, releasesAfter(history, tc.image, tc.created))
		})
	}
}
