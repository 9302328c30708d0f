//go:build !nodemo

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestObservabilityFlagsAreValidated(t *testing.T) {
	base := []string{"run", "--queue-url", "https://sqs.eu-west-1.amazonaws.com/111122223333/patch-agent", "--table", "t", "--region", "eu-west-1"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a metrics interval below 10s", []string{"--metrics-interval", "5s"}, "--metrics-interval 5s: want 0 (no CloudWatch metrics) or at least 10s"},
		{"prometheus without a health address", []string{"--prometheus", "--health-addr", ""}, "--prometheus needs --health-addr"},
		{"notifications without a bus", []string{"--event-bus", ""}, "--event-bus is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, append(append([]string(nil), base...), tc.args...)...)
			require.ErrorContains(t, res.err, tc.want)
		})
	}
}
