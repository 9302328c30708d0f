package model

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchSizeTagParsesCountsAndPercentsAndRefusesTheRest: patch-agent/batch-size is a whole number from 1 or
// a percent of desired capacity (rounded up, at least 1); anything else is an error naming the tag, so the
// group is reported misconfigured instead of rolled with a guess.
func TestBatchSizeTagParsesCountsAndPercentsAndRefusesTheRest(t *testing.T) {
	for _, tc := range []struct {
		tag     string
		desired int32
		want    int
		wantErr bool
	}{
		{tag: "", desired: 10, want: 1},
		{tag: "1", desired: 10, want: 1},
		{tag: "3", desired: 10, want: 3},
		{tag: "30%", desired: 10, want: 3},
		{tag: "25%", desired: 10, want: 3}, // 2.5 rounded up
		{tag: "1%", desired: 10, want: 1},
		{tag: "100%", desired: 4, want: 4},
		{tag: "0", wantErr: true},
		{tag: "-2", wantErr: true},
		{tag: "1.5", wantErr: true},
		{tag: "0%", wantErr: true},
		{tag: "150%", wantErr: true},
		{tag: "three", wantErr: true},
		{tag: " 3", wantErr: true},
	} {
		t.Run(tc.tag, func(t *testing.T) {
			b, err := ParseBatchSize(tc.tag)
			if tc.wantErr {
				require.ErrorContains(t, err, TagBatchSize+"=")
				_, terr := TargetFromTags("g", map[string]string{TagEnabled: "true", TagPlatform: "ecs", TagCluster: "c", TagParameter: "/p", TagBatchSize: tc.tag})
				require.ErrorContains(t, terr, "group g is opted in but misconfigured: tag "+TagBatchSize)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, b.Of(tc.desired))
		})
	}
}
