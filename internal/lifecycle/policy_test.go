package lifecycle

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func mustWindow(t *testing.T, cron string, d time.Duration, zone string) *Window {
	t.Helper()
	w, err := ParseWindow(cron, d, zone)
	require.NoError(t, err)
	return w
}

func TestWindowStateAcrossMidnightAndDST(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	cases := []struct {
		name     string
		window   *Window
		now      time.Time
		open     bool
		boundary time.Time // closes at when open, opens at when closed
	}{
		{"inside a window that spans midnight", mustWindow(t, "0 22 * * *", 4*time.Hour, "UTC"),
			time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC), true, time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC)},
		{"just after it closes", mustWindow(t, "0 22 * * *", 4*time.Hour, "UTC"),
			time.Date(2026, 11, 30, 2, 0, 0, 0, time.UTC), false, time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)},
		{"at the opening minute", mustWindow(t, "0 22 * * *", 4*time.Hour, "UTC"),
			time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC), true, time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)},
		{"local time in winter (UTC+1)", mustWindow(t, "0 2 * * 6", 4*time.Hour, "Europe/Berlin"),
			time.Date(2026, 12, 5, 1, 30, 0, 0, time.UTC), true, time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)},
		{"local time in summer (UTC+2)", mustWindow(t, "0 2 * * 6", 4*time.Hour, "Europe/Berlin"),
			time.Date(2026, 7, 4, 0, 30, 0, 0, time.UTC), true, time.Date(2026, 7, 4, 4, 0, 0, 0, time.UTC)},
		{"the Saturday after the DST change opens at 02:00 local", mustWindow(t, "0 2 * * 6", time.Hour, "Europe/Berlin"),
			time.Date(2026, 3, 28, 12, 0, 0, 0, berlin), false, time.Date(2026, 4, 4, 2, 0, 0, 0, berlin)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			open, at := c.window.State(c.now)
			require.Equal(t, c.open, open)
			require.True(t, at.Equal(c.boundary), "got %s want %s", at, c.boundary)
		})
	}
}

func TestParsePolicyTagsReportsEveryProblem(t *testing.T) {
	_, err := ParsePolicyTags(map[string]string{TagMinAMIAge: "a week", TagApproval: "sometimes",
		TagMaintenanceWindow: "0 2 * * 6 4h Mars/Olympus"})
	require.Error(t, err)
	for _, want := range []string{TagMinAMIAge, TagApproval, "Mars/Olympus"} {
		require.Contains(t, err.Error(), want)
	}
	p, err := ParsePolicyTags(map[string]string{TagMinAMIAge: "168h", TagApproval: "Manual", TagAlarms: "api-5xx, p99-latency",
		TagMaintenanceWindow: "30 1 * * 1-5 2h America/New_York"})
	require.NoError(t, err)
	require.Equal(t, 168*time.Hour, p.MinAMIAge)
	require.Equal(t, ApprovalManual, p.Approval)
	require.Equal(t, []string{"api-5xx", "p99-latency"}, p.Alarms)
	require.Equal(t, 2*time.Hour, p.Window.Duration)
}

func TestParseWindowRejectsBadInput(t *testing.T) {
	for name, c := range map[string]struct {
		cron string
		d    time.Duration
		zone string
	}{
		"six fields":    {"0 0 2 * * 6", time.Hour, "UTC"},
		"zero duration": {"0 2 * * 6", 0, "UTC"},
		"over a week":   {"0 2 * * 6", 200 * time.Hour, "UTC"},
		"unknown zone":  {"0 2 * * 6", time.Hour, "Nowhere/Land"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseWindow(c.cron, c.d, c.zone)
			require.Error(t, err)
		})
	}
}
