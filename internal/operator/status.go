package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/patch-agent/patch-agent/internal/state"
)

// StatusRow is one target's line of `patch-agent status`, read from its rollout record and the pause locks
// only (no AWS call): the counts are those the agent last observed. As JSON every field is always present:
// "" for a string that is not set, null for a time, an instance or a pause that is not (MarshalJSON).
type StatusRow struct {
	Group    string `json:"group"`
	Platform string `json:"platform"`
	Cluster  string `json:"cluster"`
	// TargetImageID is the AMI the group is (being) rolled to; PreviousImageID the one before it.
	TargetImageID   string `json:"targetImageId"`
	PreviousImageID string `json:"previousImageId"`
	// ChangedAt is when the agent detected the current target (the record's DetectedAt).
	ChangedAt time.Time `json:"changedAt"`
	// Instances counts the group's instances, OnTarget those running TargetImageID, Other the rest.
	Instances int         `json:"instances"`
	OnTarget  int         `json:"onTarget"`
	Other     int         `json:"other"`
	Phase     state.Phase `json:"phase"`
	// Step is the replacement step when Phase is Replacing and an instance is being replaced.
	Step            state.Step       `json:"step"`
	CurrentInstance *CurrentInstance `json:"currentInstance"`
	// Refresh is the group's instance refresh while the rollout is in one (strategy refresh); nil otherwise.
	Refresh *RefreshInfo `json:"refresh"`
	// Reason says why the rollout waits, halted or rolled back; "paused ..." while a pause holds it.
	Reason string `json:"reason"`
	// Warning is a standing problem of the group's configuration (e.g. no terminating lifecycle hook).
	Warning string `json:"warning"`
	// SetBack says how often an outside change (an infrastructure-as-code apply) set the group's launch template
	// back to another AMI after the agent rolled it to TargetImageID, and the launch template version of the last
	// one; "" when none (the record's SetBacks and SetBackBy).
	SetBack string `json:"setBack"`
	// Paused is the pause lock that holds the group now (the global one first), nil when not paused.
	Paused *PauseInfo `json:"paused"`
	// GroupPause is the group's own pause lock when the global pause (Paused) holds the group too: it keeps
	// holding the group after the global pause is lifted. nil otherwise.
	GroupPause *PauseInfo `json:"groupPause"`
	UpdatedAt  time.Time  `json:"updatedAt"`
}

// RefreshInfo is the instance refresh of a rollout as last described: its id, status, how far it got,
// how many instances it has left, and AWS's reason (which names what holds it).
type RefreshInfo struct {
	ID                 string `json:"id"`
	Status             string `json:"status"`
	PercentageComplete int32  `json:"percentageComplete"`
	InstancesToUpdate  int32  `json:"instancesToUpdate"`
	StatusReason       string `json:"statusReason,omitempty"`
}

// CurrentInstance is the instance being replaced and its replacement, once launched.
type CurrentInstance struct {
	Old string `json:"oldInstanceId"`
	New string `json:"newInstanceId"`
}

// PauseInfo is an active pause lock as status shows it. Scope is "global" or "group <name>". As JSON, until
// is null for a pause without an end.
type PauseInfo struct {
	Scope  string    `json:"scope"`
	Who    string    `json:"who"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
}

// ActivePause returns the lock that pauses group at now — the global lock first, then the group's own,
// expired locks skipped (the agent's order) — or nil.
func ActivePause(locks []state.Lock, group string, now time.Time) *state.Lock {
	for _, scope := range []string{state.GlobalScope, group} {
		for _, l := range locks {
			if l.Group == scope && l.Active(now) {
				return &l
			}
		}
	}
	return nil
}

// activeLock returns the active lock of exactly scope group (state.GlobalScope for the global one), or nil.
func activeLock(locks []state.Lock, group string, now time.Time) *state.Lock {
	for _, l := range locks {
		if l.Group == group && l.Active(now) {
			return &l
		}
	}
	return nil
}

func pauseInfo(l state.Lock) *PauseInfo {
	return &PauseInfo{Scope: l.Scope(), Who: l.Who, Reason: l.Reason, Since: l.Since, Until: l.Until}
}

// Status returns one row per target (group "" = every target, sorted by group), pauses evaluated at now.
// Errors: no rollout record for a named group (wraps state.ErrNotFound), or the store's errors.
func Status(ctx context.Context, store state.Store, group string, now time.Time) ([]StatusRow, error) {
	var rs []state.Rollout
	if group == "" {
		all, err := store.ListRollouts(ctx)
		if err != nil {
			return nil, fmt.Errorf("listing rollouts: %w", err)
		}
		rs = all
	} else {
		r, err := getRollout(ctx, store, group)
		if err != nil {
			return nil, err
		}
		rs = []state.Rollout{r}
	}
	locks, err := store.ListLocks(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading pause locks: %w", err)
	}
	rows := make([]StatusRow, 0, len(rs))
	for _, r := range rs {
		target, previous, onTarget := statusImages(r)
		row := StatusRow{Group: r.Group, Platform: r.Platform, Cluster: r.Cluster, TargetImageID: target,
			PreviousImageID: previous, ChangedAt: r.DetectedAt, Instances: r.Instances, OnTarget: onTarget,
			Other: max(r.Instances-onTarget, 0), Phase: r.Phase, Reason: r.Reason, Warning: r.Warning, SetBack: setBackNote(r),
			UpdatedAt: r.UpdatedAt}
		if c := r.Current; c != nil {
			row.Step = c.Step
			row.CurrentInstance = &CurrentInstance{Old: c.OldInstanceID}
		}
		if p := r.Refresh; p != nil && r.Current != nil && r.Current.Step == state.StepInstanceRefresh {
			row.CurrentInstance = nil
			row.Refresh = &RefreshInfo{ID: p.ID, Status: p.Status, PercentageComplete: p.PercentageComplete,
				InstancesToUpdate: p.InstancesToUpdate, StatusReason: p.StatusReason}
		}
		if l := ActivePause(locks, r.Group, now); l != nil {
			row.Paused = pauseInfo(*l)
			if l.Group == state.GlobalScope {
				if own := activeLock(locks, r.Group, now); own != nil {
					row.GroupPause = pauseInfo(*own)
				}
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// setBackNote is the status note of a group set back by outside changes: "set back by an outside change N
// time(s), last by launch template ... version V[ by PRINCIPAL]"; "" when it was not.
func setBackNote(r state.Rollout) string {
	if r.SetBacks == 0 {
		return ""
	}
	return fmt.Sprintf("set back by an outside change %d time(s), last by %s", r.SetBacks, r.SetBackBy)
}

// reasonCell is what the REASON column shows: the reason, else the set-back note.
func reasonCell(r StatusRow) string {
	if r.Reason == "" {
		return r.SetBack
	}
	return r.Reason
}

// TableWidth is the width in columns the default tables of status and history fit (a terminal of 120
// columns): a longer line is cut at the end with "…", and -o wide prints every column in full.
const TableWidth = 120

// RenderTable writes rows as the default status table, aligned with text/tabwriter, each line at most
// TableWidth runes: GROUP (cut at 28 runes), PHASE, STEP, ON TARGET (on target/instances), TARGET AMI, PAUSED
// (the scope: global, group, or global+group when the group's own pause is behind the global one) and
// REASON (the set-back note when there is no reason), which gets the columns the others leave and is shortened by FitText: cut at word boundaries, every
// time it names kept ("may start at T"). When the others leave REASON fewer than minReasonWidth columns (long
// group names, a long step), the reason wraps: it leaves the row for a line of its own below it, indented
// ("  reason: ..."), as wide as the table. "-" for empty values. RenderWideTable has every column in full.
// Write errors of w are not reported (it is a terminal or a pipe).
func RenderTable(w io.Writer, rows []StatusRow) {
	header := []string{"GROUP", "PHASE", "STEP", "ON TARGET", "TARGET AMI", "PAUSED"}
	cells := make([][]string, len(rows))
	widths := make([]int, len(header))
	for i, h := range header {
		widths[i] = utf8.RuneCountInString(h)
	}
	for i, r := range rows {
		paused := ""
		if r.Paused != nil {
			paused, _, _ = strings.Cut(r.Paused.Scope, " ")
			if r.GroupPause != nil {
				paused += "+group"
			}
		}
		cells[i] = []string{cut(r.Group, groupCellWidth), dash(r.Phase.String()), dash(r.Step.String()),
			fmt.Sprintf("%d/%d", r.OnTarget, r.Instances), dash(r.TargetImageID), dash(paused)}
		for j, c := range cells[i] {
			widths[j] = max(widths[j], utf8.RuneCountInString(c))
		}
	}
	reasonWidth := TableWidth
	for _, n := range widths {
		reasonWidth -= n + columnGap
	}
	wrap := reasonWidth < minReasonWidth
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, columnGap, ' ', 0)
	if wrap {
		fmt.Fprintln(tw, strings.Join(header, "\t"))
	} else {
		fmt.Fprintln(tw, strings.Join(header, "\t")+"\tREASON")
	}
	for i, r := range rows {
		if wrap {
			fmt.Fprintln(tw, strings.Join(cells[i], "\t"))
		} else {
			fmt.Fprintln(tw, strings.Join(cells[i], "\t")+"\t"+dash(FitText(reasonCell(r), reasonWidth)))
		}
	}
	_ = tw.Flush()
	if !wrap {
		writeFitted(w, buf.String())
		return
	}
	// The rows are aligned first; then each reason gets its line below its row.
	lines := strings.Split(strings.TrimSuffix(buf.String(), "\n"), "\n")
	var out strings.Builder
	out.WriteString(lines[0] + "\n")
	for i, r := range rows {
		out.WriteString(lines[i+1] + "\n")
		if reason := reasonCell(r); strings.TrimSpace(reason) != "" {
			out.WriteString(reasonIndent + FitText(reason, TableWidth-utf8.RuneCountInString(reasonIndent)) + "\n")
		}
	}
	writeFitted(w, out.String())
}

// reasonIndent starts the line of a wrapped reason in the default status table.
const reasonIndent = "  reason: "

// columnGap is the spaces between two columns of the tables.
const columnGap = 2

// minReasonWidth is the fewest runes the REASON column of the default status table gets, however wide the
// other columns are: enough for "soak: … may start at 2026-12-03T10:00:00Z".
const minReasonWidth = 44

// timeWord matches a word that names a time or a date: 2026-12-03T10:00:00Z, 03:00-04:00, 2026-12-03.
var timeWord = regexp.MustCompile(`\d{1,2}:\d{2}|\d{4}-\d{2}-\d{2}`)

// FitText shortens free text (a status reason) to at most n runes for a table cell, one line: it keeps as
// many leading words as fit, then only the words that name a time or a date (timeWord) with the three words
// before each ("may start at 2026-...", "since 2026-..."), each run of dropped words replaced by one "…".
// Text that fits (whitespace folded to single spaces) is returned whole; when even the times do not fit, the
// text is cut at n runes, the last one "…".
func FitText(s string, n int) string {
	words := strings.Fields(s)
	whole := strings.Join(words, " ")
	if utf8.RuneCountInString(whole) <= n {
		return whole
	}
	keep := make([]bool, len(words))
	for i, w := range words {
		if timeWord.MatchString(w) {
			for j := max(0, i-3); j <= i; j++ {
				keep[j] = true
			}
		}
	}
	for p := len(words) - 1; p >= 0; p-- {
		out := append([]string{}, words[:p]...)
		dropping := false
		for i := p; i < len(words); i++ {
			switch {
			case keep[i]:
				out, dropping = append(out, words[i]), false
			case !dropping:
				out, dropping = append(out, "…"), true
			}
		}
		if t := strings.Join(out, " "); utf8.RuneCountInString(t) <= n {
			return t
		}
	}
	return cut(whole, n)
}

// groupCellWidth is the most runes of a group name the default status table shows (Auto Scaling allows 255).
const groupCellWidth = 28

// cut shortens s to at most n runes, the last one "…".
func cut(s string, n int) string {
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// RenderWideTable writes rows as the table of `status -o wide`: every column, nothing cut (WideHeader,
// WideCells).
func RenderWideTable(w io.Writer, rows []StatusRow) {
	tw := tabwriter.NewWriter(w, 0, 0, columnGap, ' ', 0)
	fmt.Fprintln(tw, strings.Join(WideHeader(), "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(WideCells(r), "\t"))
	}
	_ = tw.Flush()
}

// WideHeader names the columns of `status -o wide`: GROUP, PLATFORM, CLUSTER, PHASE, STEP, ON TARGET, OTHER,
// TARGET AMI, PREVIOUS AMI, CHANGED, CURRENT (old -> new instance), PAUSED (scope, who, until, why), UPDATED,
// REASON, WARNING.
func WideHeader() []string {
	return []string{"GROUP", "PLATFORM", "CLUSTER", "PHASE", "STEP", "ON TARGET", "OTHER", "TARGET AMI", "PREVIOUS AMI",
		"CHANGED", "CURRENT", "PAUSED", "UPDATED", "REASON", "WARNING"}
}

// WideCells is r's row of `status -o wide`, in WideHeader's order: every value in full on one line, times in
// UTC (RFC 3339), "-" for empty values.
func WideCells(r StatusRow) []string {
	current := ""
	if c := r.CurrentInstance; c != nil {
		current = c.Old + " -> " + dash(c.New)
	}
	if f := r.Refresh; f != nil {
		current = fmt.Sprintf("refresh %s %s %d%%, %d left", dash(f.ID), dash(f.Status), f.PercentageComplete, f.InstancesToUpdate)
	}
	paused := pauseCell(r.Paused)
	if r.GroupPause != nil {
		paused += "; also " + pauseCell(r.GroupPause)
	}
	return []string{r.Group, dash(r.Platform), dash(r.Cluster), dash(r.Phase.String()), dash(r.Step.String()),
		fmt.Sprintf("%d/%d", r.OnTarget, r.Instances), fmt.Sprint(r.Other), dash(r.TargetImageID), dash(r.PreviousImageID),
		dash(timeCell(r.ChangedAt)), dash(current), dash(paused), dash(timeCell(r.UpdatedAt)), dash(oneLine(reasonCell(r))),
		dash(oneLine(r.Warning))}
}

// writeFitted writes the lines of table to w, each cut to TableWidth runes (the last one "…").
func writeFitted(w io.Writer, table string) {
	for _, line := range strings.SplitAfter(table, "\n") {
		if line == "" {
			continue
		}
		fmt.Fprintln(w, cut(strings.TrimRight(strings.TrimSuffix(line, "\n"), " "), TableWidth))
	}
}

// pauseCell is a pause as the PAUSED column shows it: "SCOPE by WHO[ until T]: WHY", "" for nil.
func pauseCell(p *PauseInfo) string {
	if p == nil {
		return ""
	}
	s := p.Scope + " by " + oneLine(p.Who)
	if !p.Until.IsZero() {
		s += " until " + timeCell(p.Until)
	}
	return s + ": " + oneLine(p.Reason)
}

// History returns the AMI history of group, oldest first. Errors: group empty; no history and no rollout
// record (wraps state.ErrNotFound: most likely a misspelt group); the store's errors.
func History(ctx context.Context, store state.Store, group string) ([]state.HistoryEntry, error) {
	if group == "" {
		return nil, errors.New("history needs a group")
	}
	hist, err := store.History(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("reading history of %s: %w", group, err)
	}
	if len(hist) == 0 {
		if _, err := getRollout(ctx, store, group); err != nil {
			return nil, err
		}
	}
	return hist, nil
}

// RenderHistory writes history entries as the default history table, aligned with text/tabwriter, each
// line at most TableWidth runes, times in UTC (RFC 3339): AT, EVENT, FROM → TO (read in the direction of the
// event, EventDirection) and DETAIL (cut to fit). RenderWideHistory adds the SSM parameter. The AMIs as
// stored (previous, new) are in the JSON. Write errors of w are not reported.
func RenderHistory(w io.Writer, entries []state.HistoryEntry) {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tFROM → TO\tDETAIL")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", timeCell(e.At), e.Event, directionCell(e), dash(oneLine(e.Detail)))
	}
	_ = tw.Flush()
	writeFitted(w, buf.String())
}

// RenderWideHistory writes history entries as the table of `history -o wide`, nothing cut: AT, EVENT,
// FROM → TO, SOURCE (the SSM parameter and its version), DETAIL.
func RenderWideHistory(w io.Writer, entries []state.HistoryEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tFROM → TO\tSOURCE\tDETAIL")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", timeCell(e.At), e.Event, directionCell(e), dash(sourceCell(e)), dash(oneLine(e.Detail)))
	}
	_ = tw.Flush()
}

// directionCell is "FROM → TO" of an entry, "-" for a side it does not name, "-" when it names none.
func directionCell(e state.HistoryEntry) string {
	if from, to := EventDirection(e); from != "" || to != "" {
		return dash(from) + " → " + dash(to)
	}
	return "-"
}

// sourceCell is the SSM parameter of an entry and its version: "/aws/service/... (version 4)".
func sourceCell(e state.HistoryEntry) string {
	if e.Source != "" && e.SourceVersion > 0 {
		return e.Source + fmt.Sprintf(" (version %d)", e.SourceVersion)
	}
	return e.Source
}

// EventDirection returns the AMIs an entry's event moves the group from and to. Every event reads as
// stored (previous → new: a detection, a completed or halted rollout, a manual rollback, an approval)
// except the agent's own rollback: "rolling-back" is stored as the rollout it undoes (previous → failed
// target) and "rolled-back" as failed target → restored AMI, so both read from the failed AMI to the
// restored one.
func EventDirection(e state.HistoryEntry) (from, to string) {
	if e.Event == "rolling-back" {
		return e.NewImage, e.PreviousImage
	}
	return e.PreviousImage, e.NewImage
}

func timeCell(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// oneLine keeps a free-text cell on its line and in its column, and the terminal's state as it is: a line
// break or tab is a space, any other control character (an escape sequence's ESC, a carriage return) is
// written as its Go escape. Pause reasons, who paused and history details are written by whoever may write
// the table.
func oneLine(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
			b.WriteByte(' ')
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// statusImages returns the TARGET AMI, PREVIOUS AMI and ON TARGET count status shows for r: the AMI the group
// is (being) rolled to. A managed node group's rollback already records it so (state.Rollout.ShownImages). An
// Auto Scaling group's automatic rollback (RollingBack, RolledBack) keeps TargetImageID the AMI rolled back
// from (so that it is not rolled again) and counts OnTarget on it: status shows the AMI the rollback goes to
// (PreviousImageID, the launch template restored) and counts as on it the instances not on the AMI rolled
// back from. Notifications keep the record's ids (docs/notifications.md).
func statusImages(r state.Rollout) (target, previous string, onTarget int) {
	target, previous, swapped := r.StatusImages()
	if swapped {
		return target, previous, max(r.Instances-r.OnTarget, 0)
	}
	return target, previous, r.OnTarget
}
