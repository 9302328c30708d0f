package operator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/patch-agent/patch-agent/internal/state"
)

// StatusRow is one target's line of `patch-agent status`, read from its rollout record and the pause locks
// only (no AWS call): the counts are those the agent last observed.
type StatusRow struct {
	Group    string `json:"group"`
	Platform string `json:"platform"`
	Cluster  string `json:"cluster,omitempty"`
	// TargetImageID is the AMI the group is (being) rolled to; PreviousImageID the one before it.
	TargetImageID   string `json:"targetImageId,omitempty"`
	PreviousImageID string `json:"previousImageId,omitempty"`
	// ChangedAt is when the agent detected the current target (the record's DetectedAt).
	ChangedAt time.Time `json:"changedAt,omitzero"`
	// Instances counts the group's instances, OnTarget those running TargetImageID, Other the rest.
	Instances int         `json:"instances"`
	OnTarget  int         `json:"onTarget"`
	Other     int         `json:"other"`
	Phase     state.Phase `json:"phase"`
	// Step is the replacement step when Phase is Replacing and an instance is being replaced.
	Step            state.Step       `json:"step,omitempty"`
	CurrentInstance *CurrentInstance `json:"currentInstance,omitempty"`
	// Reason says why the rollout waits, halted or rolled back; "paused ..." while a pause holds it.
	Reason string `json:"reason,omitempty"`
	// Warning is a standing problem of the group's configuration (e.g. no terminating lifecycle hook).
	Warning string `json:"warning,omitempty"`
	// Paused is the pause lock that holds the group now (the global one first), nil when not paused.
	Paused *PauseInfo `json:"paused,omitempty"`
	// GroupPause is the group's own pause lock when the global pause (Paused) holds the group too: it keeps
	// holding the group after the global pause is lifted. nil otherwise.
	GroupPause *PauseInfo `json:"groupPause,omitempty"`
	UpdatedAt  time.Time  `json:"updatedAt,omitzero"`
}

// CurrentInstance is the instance being replaced and its replacement, once launched.
type CurrentInstance struct {
	Old string `json:"oldInstanceId"`
	New string `json:"newInstanceId,omitempty"`
}

// PauseInfo is an active pause lock as status shows it. Scope is "global" or "group <name>".
type PauseInfo struct {
	Scope  string    `json:"scope"`
	Who    string    `json:"who"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until,omitzero"`
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
		row := StatusRow{Group: r.Group, Platform: r.Platform, Cluster: r.Cluster, TargetImageID: r.TargetImageID,
			PreviousImageID: r.PreviousImageID, ChangedAt: r.DetectedAt, Instances: r.Instances, OnTarget: r.OnTarget,
			Other: max(r.Instances-r.OnTarget, 0), Phase: r.Phase, Reason: r.Reason, Warning: r.Warning, UpdatedAt: r.UpdatedAt}
		if c := r.Current; c != nil {
			row.Step = c.Step
			row.CurrentInstance = &CurrentInstance{Old: c.OldInstanceID, New: c.NewInstanceID}
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

// RenderTable writes rows as a table aligned with text/tabwriter, one line per group, "-" for empty
// values, times in UTC (RFC 3339). Write errors of w are not reported (it is a terminal or a pipe).
func RenderTable(w io.Writer, rows []StatusRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tPLATFORM\tCLUSTER\tPHASE\tSTEP\tON TARGET\tOTHER\tTARGET AMI\tPREVIOUS AMI\tCHANGED\tCURRENT\tPAUSED\tUPDATED\tREASON")
	for _, r := range rows {
		current := ""
		if c := r.CurrentInstance; c != nil {
			current = c.Old + " -> " + dash(c.New)
		}
		paused := pauseCell(r.Paused)
		if r.GroupPause != nil {
			paused += "; also " + pauseCell(r.GroupPause)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Group, dash(r.Platform), dash(r.Cluster),
			dash(string(r.Phase)), dash(string(r.Step)), r.OnTarget, r.Instances, r.Other, dash(r.TargetImageID),
			dash(r.PreviousImageID), dash(timeCell(r.ChangedAt)), dash(current), dash(paused), dash(timeCell(r.UpdatedAt)),
			dash(oneLine(r.Reason)))
	}
	_ = tw.Flush()
}

// pauseCell is a pause as the PAUSED column shows it: "SCOPE by WHO[ until T]: WHY", "" for nil.
func pauseCell(p *PauseInfo) string {
	if p == nil {
		return ""
	}
	s := p.Scope + " by " + p.Who
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

// RenderHistory writes history entries as a table aligned with text/tabwriter, times in UTC (RFC 3339).
// FROM → TO reads in the direction of each entry's event (EventDirection); PREVIOUS AMI and NEW AMI are the
// entry's fields as stored. Write errors of w are not reported.
func RenderHistory(w io.Writer, entries []state.HistoryEntry) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tEVENT\tFROM → TO\tPREVIOUS AMI\tNEW AMI\tSOURCE\tDETAIL")
	for _, e := range entries {
		source := e.Source
		if source != "" && e.SourceVersion > 0 {
			source += fmt.Sprintf(" (version %d)", e.SourceVersion)
		}
		direction := ""
		if from, to := EventDirection(e); from != "" || to != "" {
			direction = dash(from) + " → " + dash(to)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", timeCell(e.At), e.Event, dash(direction), dash(e.PreviousImage),
			dash(e.NewImage), dash(source), dash(oneLine(e.Detail)))
	}
	_ = tw.Flush()
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

// oneLine keeps a free-text cell on its line and in its column.
func oneLine(s string) string {
	return strings.NewReplacer("\n", " ", "\t", " ").Replace(s)
}
