package model

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Policy tags on an Auto Scaling group (all optional).
const (
	TagMinAMIAge = "patch-agent/min-ami-age" // Go duration, e.g. "168h": soak time measured from the parameter's LastModifiedDate
	TagApproval  = "patch-agent/approval"    // "auto" (default) or "manual": wait for `patch-agent approve GROUP`
	TagAlarms    = "patch-agent/alarms"      // CloudWatch alarm names separated by spaces or commas: any in ALARM holds the rollout
	// TagMaintenanceWindow is "<5-field cron> <duration> <IANA zone>", e.g. "0 2 * * 6 4h Europe/Berlin", or a
	// daily wall-clock range "<HH:MM>-<HH:MM> <IANA zone>", e.g. "22:00-04:00 Europe/Berlin" (ParseWindowTag).
	TagMaintenanceWindow = "patch-agent/maintenance-window"
)

// Approval modes.
const (
	ApprovalAuto   = "auto"
	ApprovalManual = "manual"
)

// TargetPolicy holds the gates of one target. The zero value rolls at once, with the agent's timeouts.
type TargetPolicy struct {
	// MinAMIAge is the soak time: a new AMI is rolled only once its parameter's LastModifiedDate is at
	// least this old.
	MinAMIAge time.Duration `json:"minAmiAge,omitempty"`
	// Window, when set, is when destructive steps may start.
	Window *Window `json:"maintenanceWindow,omitempty"`
	// Approval is ApprovalAuto (default) or ApprovalManual.
	Approval string `json:"approval,omitempty"`
	// Alarms are CloudWatch alarm names; any in ALARM holds the rollout.
	Alarms []string `json:"alarms,omitempty"`
	// Strategy is the TagStrategy value ("" = auto).
	Strategy string `json:"strategy,omitempty"`
	// AllowedAMIOwners are AMI owners (account ids, owner aliases) the AMI gate accepts for this group on top of
	// the agent's own (TagAllowedAMIOwners).
	AllowedAMIOwners []string `json:"allowedAmiOwners,omitempty"`
	// AllowAMIFamilyChange lets the AMI gate pass an AMI of another OS family (TagAllowAMIFamilyChange).
	AllowAMIFamilyChange bool `json:"allowAmiFamilyChange,omitempty"`
	// StandaloneTasks is what a rollout does about standalone tasks on outdated instances
	// (TagStandaloneTasks, engine/standalone.go): StandaloneWait (default) or StandaloneRefuse.
	StandaloneTasks string `json:"standaloneTasks,omitempty"`
	// BatchSize is how many instances one instance refresh replaces at once (TagBatchSize, batchsize.go).
	BatchSize BatchSize `json:"batchSize,omitzero"`
	// MaxInstanceAge is the maximum instance lifetime (TagMaxInstanceAge, engine/rollout_maxage.go); 0: none.
	MaxInstanceAge time.Duration `json:"maxInstanceAge,omitempty"`
	// Canary is how many instances a rollout by instance refresh replaces first, then bakes for CanaryBake
	// under the alarms before the rest (TagCanary, TagCanaryBake, canary.go); 0: no canary.
	Canary     int           `json:"canary,omitempty"`
	CanaryBake time.Duration `json:"canaryBake,omitempty"`
}

// Window is a maintenance window, in one of two forms, both evaluated in an IANA time zone:
//   - cron + duration: it opens at every activation of a 5-field cron expression (local time, so across DST
//     changes too) and stays open for Duration of elapsed time — across midnight too. On a DST change night the
//     local closing time moves by the hour gained or lost (22:00 + 6h closes at 05:00 local in spring, 03:00 in
//     autumn);
//   - a daily wall-clock range (Hours, "22:00-04:00"): open whenever the local wall-clock time is in
//     [start, end), the range wrapping midnight when end <= start. The end never moves with DST. In the skipped
//     spring hour the clock jumps over those minutes (a range starting at 02:30 opens at 03:00); in the
//     repeated autumn hour both passes count as the same wall-clock time (a range ending at 02:30 closes at the
//     second 02:30).
type Window struct {
	Cron     string        `json:"cron,omitempty"`
	Duration time.Duration `json:"duration,omitempty"`
	// Hours is the wall-clock range form, "HH:MM-HH:MM"; empty for the cron form.
	Hours string `json:"hours,omitempty"`
	Zone  string `json:"timezone"`

	loc        *time.Location
	schedule   cron.Schedule
	start, end int // the range form's bounds in minutes after local midnight
}

// ParseWindowHours builds the daily wall-clock range form "HH:MM-HH:MM" in zone (default UTC). A range whose
// start equals its end is refused (always open is no window at all; leave the tag out instead).
func ParseWindowHours(hours, zone string) (*Window, error) {
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("maintenance window time zone %q: %w", zone, err)
	}
	from, to, ok := strings.Cut(hours, "-")
	if !ok {
		return nil, fmt.Errorf("maintenance window hours %q: want HH:MM-HH:MM, e.g. 22:00-04:00", hours)
	}
	minutes := func(hm string) (int, error) {
		t, err := time.Parse("15:04", hm)
		if err != nil {
			return 0, fmt.Errorf("maintenance window hours %q: %q is not HH:MM (00:00 to 23:59)", hours, hm)
		}
		return t.Hour()*60 + t.Minute(), nil
	}
	start, err := minutes(from)
	if err != nil {
		return nil, err
	}
	end, err := minutes(to)
	if err != nil {
		return nil, err
	}
	if start == end {
		return nil, fmt.Errorf("maintenance window hours %q: start and end are the same time", hours)
	}
	return &Window{Hours: hours, Zone: zone, loc: loc, start: start, end: end}, nil
}

// ParseWindow validates and builds a window. Errors name the part that is wrong.
func ParseWindow(spec string, duration time.Duration, zone string) (*Window, error) {
	if zone == "" {
		zone = "UTC"
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("maintenance window time zone %q: %w", zone, err)
	}
	sched, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("maintenance window cron %q (want 5 fields: minute hour day-of-month month day-of-week): %w", spec, err)
	}
	if duration <= 0 || duration > 7*24*time.Hour {
		return nil, fmt.Errorf("maintenance window duration %s: want more than 0 and at most 168h", duration)
	}
	return &Window{Cron: spec, Duration: duration, Zone: zone, loc: loc, schedule: sched}, nil
}

// ParseWindowTag parses TagMaintenanceWindow: "<5-field cron> <duration> <zone>" or "<HH:MM>-<HH:MM> <zone>".
func ParseWindowTag(v string) (*Window, error) {
	f := strings.Fields(v)
	if len(f) == 2 && strings.Contains(f[0], ":") {
		w, err := ParseWindowHours(f[0], f[1])
		if err != nil {
			return nil, fmt.Errorf("tag %s: %w", TagMaintenanceWindow, err)
		}
		return w, nil
	}
	if len(f) != 7 {
		return nil, fmt.Errorf("tag %s=%q: want \"<minute> <hour> <dom> <month> <dow> <duration> <IANA zone>\" (e.g. \"0 2 * * 6 4h Europe/Berlin\") or \"<HH:MM>-<HH:MM> <IANA zone>\" (e.g. \"22:00-04:00 Europe/Berlin\")", TagMaintenanceWindow, v)
	}
	d, err := time.ParseDuration(f[5])
	if err != nil {
		return nil, fmt.Errorf("tag %s: duration %q: %w", TagMaintenanceWindow, f[5], err)
	}
	return ParseWindow(strings.Join(f[:5], " "), d, f[6])
}

// State reports whether the window is open at now and, when it is, when it closes; when it is not, when it
// next opens. A window is open at now when an activation s satisfies s <= now < s+Duration.
func (w *Window) State(now time.Time) (open bool, at time.Time) {
	if w.Hours != "" {
		return w.rangeState(now)
	}
	local := now.In(w.loc)
	s := w.schedule.Next(local.Add(-w.Duration))
	if !s.After(local) {
		return true, s.Add(w.Duration)
	}
	return false, s
}

// inRange reports whether the local wall-clock time of t is inside the range form's [start, end).
func (w *Window) inRange(t time.Time) bool {
	l := t.In(w.loc)
	m := l.Hour()*60 + l.Minute()
	if w.start < w.end {
		return w.start <= m && m < w.end
	}
	return m >= w.start || m < w.end
}

// rangeState is State for the wall-clock range form: the next change is found minute by minute on the real
// timeline (at most 25 hours of minutes, a DST day included), so skipped and repeated local hours are handled
// by the wall clock itself.
func (w *Window) rangeState(now time.Time) (bool, time.Time) {
	open := w.inRange(now)
	t := now.Truncate(time.Minute)
	for range 25 * 60 {
		t = t.Add(time.Minute)
		if w.inRange(t) != open {
			return open, t
		}
	}
	return open, t
}

// Describe says the window in words for status reasons: "0 2 * * 6 for 4h0m0s, Europe/Berlin" or
// "22:00-04:00 Europe/Berlin".
func (w *Window) Describe() string {
	if w.Hours != "" {
		return w.Hours + " " + w.Zone
	}
	return fmt.Sprintf("%s for %s, %s", w.Cron, w.Duration, w.Zone)
}

// ParsePolicyTags reads the policy tags of a group. Every problem is reported.
func ParsePolicyTags(tags map[string]string) (TargetPolicy, error) {
	var p TargetPolicy
	var errs []error
	if v := tags[TagMinAMIAge]; v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf("tag %s=%q: want a duration such as 168h", TagMinAMIAge, v))
		}
		p.MinAMIAge = d
	}
	switch v := strings.ToLower(tags[TagApproval]); v {
	case "", ApprovalAuto:
		p.Approval = ApprovalAuto
	case ApprovalManual:
		p.Approval = ApprovalManual
	default:
		errs = append(errs, fmt.Errorf("tag %s=%q: want auto or manual", TagApproval, v))
	}
	if v := tags[TagAlarms]; v != "" {
		p.Alarms = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
	}
	if v := tags[TagStrategy]; v != "" {
		if _, err := ChooseStrategy(v, GroupTraits{}); err != nil {
			errs = append(errs, err)
		}
		p.Strategy = v
	}
	if v := tags[TagAllowedAMIOwners]; v != "" {
		owners, err := ParseAMIOwners(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("tag %s: %w", TagAllowedAMIOwners, err))
		}
		p.AllowedAMIOwners = owners
	}
	switch v := strings.ToLower(tags[TagAllowAMIFamilyChange]); v {
	case "", "false":
	case "true":
		p.AllowAMIFamilyChange = true
	default:
		errs = append(errs, fmt.Errorf("tag %s=%q: want true or false", TagAllowAMIFamilyChange, v))
	}
	standalone, err := ParseStandaloneTasks(tags[TagStandaloneTasks])
	if err != nil {
		errs = append(errs, err)
	}
	p.StandaloneTasks = standalone
	if p.BatchSize, err = ParseBatchSize(tags[TagBatchSize]); err != nil {
		errs = append(errs, err)
	}
	if p.MaxInstanceAge, err = ParseMaxInstanceAge(tags[TagMaxInstanceAge]); err != nil {
		errs = append(errs, err)
	}
	if p.Canary, p.CanaryBake, err = ParseCanary(tags[TagCanary], tags[TagCanaryBake]); err != nil {
		errs = append(errs, err)
	}
	if v := tags[TagMaintenanceWindow]; v != "" {
		w, err := ParseWindowTag(v)
		if err != nil {
			errs = append(errs, err)
		}
		p.Window = w
	}
	return p, errors.Join(errs...)
}

// AlarmChecker tells which of the named CloudWatch alarms are in ALARM.
type AlarmChecker interface {
	InAlarm(ctx context.Context, names []string) ([]string, error)
}

// TagMaxInstanceAge is the maximum instance lifetime of a group: instances older than it
// (EC2 LaunchTime, as DescribeInstances reports it in the group's view) are replaced even when they run the
// current AMI, through the same gates and budgets as an AMI rollout — maintenance window, pause, approval (when
// the group's tags require it; an approval belongs to one rollout) and alarms — but without the soak (no new
// AMI). A number of days ("21d") or a Go duration ("504h"); at least 1 day. Like Karpenter's expireAfter and
// EKS Auto Mode's node expiry.
const TagMaxInstanceAge = "patch-agent/max-instance-age"

// minMaxInstanceAge is the shortest maximum instance lifetime accepted: a shorter one would keep a group
// replacing itself.
const minMaxInstanceAge = 24 * time.Hour

// ParseMaxInstanceAge reads TagMaxInstanceAge: "" (no maximum, 0), "<n>d" (n whole days) or a Go duration
// ("504h"), at least 1 day. Anything else is an error naming the tag and the value.
func ParseMaxInstanceAge(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	var d time.Duration
	var err error
	if days, ok := strings.CutSuffix(v, "d"); ok {
		var n int
		n, err = strconv.Atoi(days)
		d = time.Duration(n) * 24 * time.Hour
	} else {
		d, err = time.ParseDuration(v)
	}
	if err != nil || d < minMaxInstanceAge {
		return 0, fmt.Errorf("tag %s=%q: want a lifetime of at least 1 day, in days (21d) or as a duration (504h)", TagMaxInstanceAge, v)
	}
	return d, nil
}

// Tasks ECS will not move (docs/ecs.md, "Tasks ECS will not move").
//
// Amazon ECS Developer Guide, "Draining Amazon ECS container instances": DRAINING replaces service tasks on
// other instances; standalone tasks (RunTask, StartTask, an AWS Batch job) are not affected and must end by
// themselves. The agent never counts them as drained (ecsdrain.Status). What it does about them is the group's
// choice, TagStandaloneTasks:
//   - StandaloneWait (default): the terminating lifecycle action drains the instance and waits for them to end
//     until the drain deadline (lifecycleaction/hooks.go);
//   - StandaloneRefuse: refuse the group — the rollout halts, without a rollback and before it changes anything
//     (start, engine/rollout_detect.go), with a reason naming the instances and their standalone tasks.
const (
	TagStandaloneTasks = "patch-agent/standalone-tasks"
	StandaloneWait     = "wait"
	StandaloneRefuse   = "refuse"
)

// ParseStandaloneTasks reads TagStandaloneTasks: "wait" (also when absent) or "refuse", in any letter case.
func ParseStandaloneTasks(v string) (string, error) {
	switch strings.ToLower(v) {
	case "", StandaloneWait:
		return StandaloneWait, nil
	case StandaloneRefuse:
		return StandaloneRefuse, nil
	}
	return "", fmt.Errorf("tag %s=%q: want wait or refuse", TagStandaloneTasks, v)
}
