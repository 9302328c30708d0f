package operator

import (
	"encoding/csv"
	"io"
	"strconv"

	"github.com/patch-agent/patch-agent/internal/state"
)

// StatusCSVHeader is the header row of `status -o csv`: the columns of the wide table, one value a cell (the
// instance being replaced and its replacement, the pause's scope, who, until and why apart), times in UTC
// (RFC 3339), "" for a value that is not set.
func StatusCSVHeader() []string {
	return []string{"group", "platform", "cluster", "phase", "step", "on_target", "instances", "other", "target_image_id",
		"previous_image_id", "changed_at", "old_instance_id", "new_instance_id", "paused_scope", "paused_by", "paused_until",
		"paused_reason", "updated_at", "reason", "warning"}
}

// WriteStatusCSV writes rows as CSV (RFC 4180) under StatusCSVHeader.
func WriteStatusCSV(w io.Writer, rows []StatusRow) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(StatusCSVHeader()); err != nil {
		return err
	}
	for _, r := range rows {
		var old, repl, scope, by, until, why string
		if c := r.CurrentInstance; c != nil {
			old, repl = c.Old, c.New
		}
		if p := r.Paused; p != nil {
			scope, by, until, why = p.Scope, p.Who, timeCell(p.Until), p.Reason
		}
		if err := cw.Write([]string{r.Group, r.Platform, r.Cluster, r.Phase.String(), r.Step.String(), strconv.Itoa(r.OnTarget),
			strconv.Itoa(r.Instances), strconv.Itoa(r.Other), r.TargetImageID, r.PreviousImageID, timeCell(r.ChangedAt), old, repl,
			scope, by, until, why, timeCell(r.UpdatedAt), r.Reason, r.Warning}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// HistoryCSVHeader is the header row of `history -o csv`: every entry's time (UTC, RFC 3339), event, the AMIs
// in the direction of the event (EventDirection), the SSM parameter and its version ("" when none), and the
// detail.
func HistoryCSVHeader() []string {
	return []string{"at", "event", "from_image_id", "to_image_id", "source", "source_version", "detail"}
}

// WriteHistoryCSV writes entries as CSV (RFC 4180) under HistoryCSVHeader.
func WriteHistoryCSV(w io.Writer, entries []state.HistoryEntry) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(HistoryCSVHeader()); err != nil {
		return err
	}
	for _, e := range entries {
		from, to := EventDirection(e)
		version := ""
		if e.SourceVersion > 0 {
			version = strconv.FormatInt(int64(e.SourceVersion), 10)
		}
		if err := cw.Write([]string{timeCell(e.At), e.Event, from, to, e.Source, version, e.Detail}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
