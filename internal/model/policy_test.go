package model

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

// Field case C22: a maintenance window "22:00-04:00 Europe/Berlin" (the wall-clock range form) and the cron +
// duration form, on an ordinary day and on both DST change days of 2026 (Sunday 29 March: 02:00 -> 03:00;
// Sunday 25 October: 03:00 -> 02:00, the hour 02:00-03:00 passed twice).
func TestC22MaintenanceWindowAcrossMidnightOnOrdinaryAndDSTDays(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	require.NoError(t, err)
	at := func(y int, m time.Month, d, hh, mm int) time.Time { return time.Date(y, m, d, hh, mm, 0, 0, berlin) }
	rangeForm, err := ParseWindowTag("22:00-04:00 Europe/Berlin")
	require.NoError(t, err)
	cronForm, err := ParseWindowTag("0 22 * * * 6h Europe/Berlin")
	require.NoError(t, err)

	for _, day := range []struct {
		name       string
		night, day time.Time // 23:30 of the evening before, and the morning's date
	}{
		{"ordinary day", at(2026, 5, 12, 23, 30), at(2026, 5, 13, 0, 0)},
		{"spring DST change", at(2026, 3, 28, 23, 30), at(2026, 3, 29, 0, 0)},
		{"autumn DST change", at(2026, 10, 24, 23, 30), at(2026, 10, 25, 0, 0)},
	} {
		t.Run(day.name, func(t *testing.T) {
			y, m, d := day.day.Date()
			for _, tc := range []struct {
				when time.Time
				open bool
			}{
				{day.night, true},
				{at(y, m, d, 3, 0), true},
				{at(y, m, d, 3, 59), true},
				{at(y, m, d, 4, 0), false},
				{at(y, m, d, 5, 0), false},
				{at(y, m, d, 21, 59), false},
			} {
				open, _ := rangeForm.State(tc.when)
				require.Equal(t, tc.open, open, "range form at %s", tc.when)
			}
			// The range form closes at 04:00 local whatever the night's length.
			_, closes := rangeForm.State(day.night)
			require.Equal(t, at(y, m, d, 4, 0), closes.In(berlin))

			// The cron + duration form: 23:30 inside and 05:00 outside on every day; it stays open 6 hours of
			// elapsed time, so its local end moves with the clock change (documented on Window).
			open, closes := cronForm.State(day.night)
			require.True(t, open)
			open, _ = cronForm.State(at(y, m, d, 5, 0))
			require.False(t, open, "05:00 is outside")
			wantEnd := map[string]time.Time{"ordinary day": at(y, m, d, 4, 0), "spring DST change": at(y, m, d, 5, 0),
				"autumn DST change": at(y, m, d, 3, 0)}[day.name]
			require.True(t, wantEnd.Equal(closes), "cron form closes at %s, want %s", closes.In(berlin), wantEnd)
		})
	}

	// The repeated autumn hour: both passes of 02:30 are inside the range form.
	first := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)  // 02:30 CEST
	second := time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC) // 02:30 CET
	for _, tm := range []time.Time{first, second} {
		open, _ := rangeForm.State(tm)
		require.True(t, open, tm.In(berlin).String())
	}
	// The skipped spring hour: a range starting at 02:30 opens at 03:00 local that night.
	late, err := ParseWindowTag("02:30-04:00 Europe/Berlin")
	require.NoError(t, err)
	open, opens := late.State(at(2026, 3, 29, 1, 0))
	require.False(t, open)
	require.Equal(t, at(2026, 3, 29, 3, 0), opens.In(berlin))

	for _, bad := range []string{"22:00-04:00", "22:00-22:00 UTC", "25:00-04:00 UTC", "22-04 UTC", "22:00-04:00 Mars/Olympus"} {
		_, err := ParseWindowTag(bad)
		require.Error(t, err, bad)
	}
}
