package org

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/operator"
	"github.com/patch-agent/patch-agent/internal/schema"
)

// TargetResult is one target of a report: its account, name and region, and the error that left it out
// ("" when it answered).
type TargetResult struct {
	Target
	Error string `json:"error"`
	// Seconds is how long the target took, to the millisecond.
	Seconds float64 `json:"seconds"`
}

func targetResult[T any](r Result[T]) TargetResult {
	tr := TargetResult{Target: r.Target, Seconds: float64(r.Took.Milliseconds()) / 1000}
	if r.Err != nil {
		tr.Error = r.Err.Error()
	}
	return tr
}

// AuditGroup is one group of the organization-wide audit: the account and region it is in, then the group as
// `audit -o json` writes it.
type AuditGroup struct {
	Target
	audit.Group
}

// MarshalJSON writes account, accountName and region beside the group's own fields.
func (g AuditGroup) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(g.Group)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range map[string]string{"account": g.ID, "accountName": g.Target.Name, "region": g.Region} {
		m[k], _ = json.Marshal(v)
	}
	return json.Marshal(m)
}

// AuditReport is the organization-wide audit: every target (with its error when it could not be audited),
// every group of every target, and the counts.
type AuditReport struct {
	SchemaVersion int            `json:"schemaVersion"`
	GeneratedAt   time.Time      `json:"generatedAt"`
	Targets       []TargetResult `json:"targets"`
	Groups        []AuditGroup   `json:"groups"`
	Summary       AuditSummary   `json:"summary"`
	// Warnings are the reads that failed in a target without stopping its audit, prefixed by the target.
	Warnings []string `json:"warnings"`

	reports []Result[*audit.Report]
}

// AuditSummary counts the report's targets and groups.
type AuditSummary struct {
	Targets           int `json:"targets"`
	Failed            int `json:"failed"`
	Groups            int `json:"groups"`
	Current           int `json:"current"`
	Behind            int `json:"behind"`
	Empty             int `json:"empty"`
	Unknown           int `json:"unknown"`
	HardCoded         int `json:"hardCoded"`
	Instances         int `json:"instances"`
	OutdatedInstances int `json:"outdatedInstances"`
}

// NewAuditReport gathers the results of Audit into one report dated now.
func NewAuditReport(results []Result[*audit.Report], now time.Time) *AuditReport {
	rep := &AuditReport{SchemaVersion: schema.Version, GeneratedAt: now.UTC(), Targets: []TargetResult{}, Groups: []AuditGroup{},
		Warnings: []string{}, reports: results}
	for _, r := range results {
		rep.Targets = append(rep.Targets, targetResult(r))
		rep.Summary.Targets++
		if r.Err != nil {
			rep.Summary.Failed++
			continue
		}
		for _, w := range r.Value.Warnings {
			rep.Warnings = append(rep.Warnings, r.Target.String()+": "+w)
		}
		for _, g := range r.Value.Groups {
			rep.Groups = append(rep.Groups, AuditGroup{Target: r.Target, Group: g})
			s := &rep.Summary
			s.Groups++
			s.Instances += g.Instances
			s.OutdatedInstances += g.OutdatedInstances
			switch g.Status {
			case audit.StatusCurrent:
				s.Current++
			case audit.StatusBehind:
				s.Behind++
			case audit.StatusEmpty:
				s.Empty++
			default:
				s.Unknown++
			}
			if g.AMISource == audit.SourceHardCoded {
				s.HardCoded++
			}
		}
	}
	return rep
}

// BehindMoreThan returns "ACCOUNT REGION GROUP" of every group behind by more than d (audit.Report.BehindMoreThan).
func (rep *AuditReport) BehindMoreThan(d time.Duration) []string {
	var out []string
	for _, r := range rep.reports {
		if r.Err != nil {
			continue
		}
		for _, g := range r.Value.BehindMoreThan(d) {
			out = append(out, r.ID+" "+r.Region+" "+g)
		}
	}
	return out
}

// Failed returns the targets that could not be audited.
func (rep *AuditReport) Failed() []TargetResult { return failed(rep.Targets) }

func failed(ts []TargetResult) []TargetResult {
	var out []TargetResult
	for _, t := range ts {
		if t.Error != "" {
			out = append(out, t)
		}
	}
	return out
}

// WriteAudit renders the report: table, json or csv (audit.Formats).
func WriteAudit(w io.Writer, format string, rep *AuditReport) error {
	switch format {
	case audit.FormatJSON:
		return writeJSON(w, rep)
	case audit.FormatCSV:
		cw := csv.NewWriter(w)
		if err := cw.Write(append([]string{"account", "account_name", "region", "error"}, audit.CSVHeader()...)); err != nil {
			return err
		}
		blank := make([]string, len(audit.CSVHeader()))
		for _, t := range rep.Failed() {
			// A target that could not be audited is a row too: a spreadsheet shows the gap.
			if err := cw.Write(append([]string{t.ID, t.Name, t.Region, t.Error}, blank...)); err != nil {
				return err
			}
		}
		for _, g := range rep.Groups {
			if err := cw.Write(append([]string{g.ID, g.Target.Name, g.Region, ""}, audit.CSVRow(g.Group)...)); err != nil {
				return err
			}
		}
		cw.Flush()
		return cw.Error()
	case audit.FormatTable:
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ACCOUNT\tNAME\tREGION\tGROUP\tPLATFORM\tAMI SOURCE\tINSTANCES\tOUTDATED\tOLDEST AMI\tDAYS\tRELEASES\tSTATUS")
		for _, g := range rep.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\n", g.ID, dash(g.Target.Name), g.Region, g.Group.Name, g.Platform,
				g.AMISource, g.Instances, g.OutdatedInstances, dash(g.OldestImageID), audit.FormatCount(g.DaysBehind),
				audit.FormatCount(g.ReleasesBehind), g.Status)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		s := rep.Summary
		fmt.Fprintf(w, "\n%d of %d account-regions audited: %d groups, %d current, %d behind, %d empty, %d unknown, %d hard-coded; %d of %d instances outdated\n",
			s.Targets-s.Failed, s.Targets, s.Groups, s.Current, s.Behind, s.Empty, s.Unknown, s.HardCoded, s.OutdatedInstances, s.Instances)
		writeFailed(w, "not audited", rep.Failed())
		if len(rep.Warnings) > 0 {
			fmt.Fprintf(w, "\nwarnings:\n  %s\n", strings.Join(rep.Warnings, "\n  "))
		}
		return nil
	}
	return audit.CheckFormat(format)
}

// writeFailed lists the targets left out, with their errors.
func writeFailed(w io.Writer, what string, ts []TargetResult) {
	if len(ts) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%s (%d):\n", what, len(ts))
	for _, t := range ts {
		fmt.Fprintf(w, "  %s: %s\n", t.Target, t.Error)
	}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// StatusGroup is one group's status row with its account and region.
type StatusGroup struct {
	Target
	operator.StatusRow
}

// MarshalJSON writes account, accountName and region beside the row's own fields.
func (g StatusGroup) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(g.StatusRow)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, v := range map[string]string{"account": g.ID, "accountName": g.Name, "region": g.Region} {
		m[k], _ = json.Marshal(v)
	}
	return json.Marshal(m)
}

// StatusDocument is the organization-wide `status -o json`.
type StatusDocument struct {
	SchemaVersion int            `json:"schemaVersion"`
	Only          []string       `json:"only"`
	Targets       []TargetResult `json:"targets"`
	Groups        []StatusGroup  `json:"groups"`
}

// NewStatusDocument gathers the results of Status.
func NewStatusDocument(results []Result[[]operator.StatusRow], only []string) StatusDocument {
	doc := StatusDocument{SchemaVersion: schema.Version, Only: append([]string{}, only...), Targets: []TargetResult{}, Groups: []StatusGroup{}}
	for _, r := range results {
		doc.Targets = append(doc.Targets, targetResult(r))
		for _, row := range r.Value {
			doc.Groups = append(doc.Groups, StatusGroup{Target: r.Target, StatusRow: row})
		}
	}
	return doc
}

// Failed returns the targets whose status could not be read.
func (d StatusDocument) Failed() []TargetResult { return failed(d.Targets) }

// StatusFormats are the formats of the organization-wide status: table (the reason shortened to 60 runes by
// operator.FitText), wide (the columns of the one-account `status -o wide`, nothing cut) and json.
func StatusFormats() []string { return []string{"table", "wide", "json"} }

// WriteStatus renders the document in one of StatusFormats; another format is an error.
func WriteStatus(w io.Writer, format string, d StatusDocument) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	switch format {
	case "json":
		return writeJSON(w, d)
	case "wide":
		fmt.Fprintln(tw, "ACCOUNT\tNAME\tREGION\t"+strings.Join(operator.WideHeader(), "\t"))
		for _, g := range d.Groups {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", g.ID, dash(g.Name), g.Region, strings.Join(operator.WideCells(g.StatusRow), "\t"))
		}
		return writeStatusFooter(w, tw, d)
	case "table":
	default:
		return fmt.Errorf("--output %q: want %s", format, strings.Join(StatusFormats(), ", "))
	}
	fmt.Fprintln(tw, "ACCOUNT\tNAME\tREGION\tGROUP\tPHASE\tSTEP\tON TARGET\tTARGET AMI\tPAUSED\tREASON")
	for _, g := range d.Groups {
		paused := "-"
		if g.Paused != nil {
			paused = g.Paused.Scope
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", g.ID, dash(g.Name), g.Region, g.Group, g.Phase, dash(g.Step.String()),
			g.OnTarget, g.Instances, dash(g.TargetImageID), paused, dash(operator.FitText(g.Reason, 60)))
	}
	return writeStatusFooter(w, tw, d)
}

// writeStatusFooter flushes the table and writes the counts and the targets that could not be read.
func writeStatusFooter(w io.Writer, tw *tabwriter.Writer, d StatusDocument) error {
	if err := tw.Flush(); err != nil {
		return err
	}
	ok := len(d.Targets) - len(d.Failed())
	what := "groups"
	if len(d.Only) > 0 {
		what = "groups " + strings.Join(d.Only, " or ")
	}
	fmt.Fprintf(w, "\n%d %s in %d of %d account-regions read\n", len(d.Groups), what, ok, len(d.Targets))
	writeFailed(w, "not read", d.Failed())
	return nil
}

// cut shortens s to n runes, the last one "…"; n < 0 keeps s whole.
func cut(s string, n int) string {
	r := []rune(s)
	if n < 0 || len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// ChangeRow is one target's pause or resume.
type ChangeRow struct {
	TargetResult
	Change
}

// ChangeDocument is `pause -o json` and `resume -o json` across the organization.
type ChangeDocument struct {
	SchemaVersion int    `json:"schemaVersion"`
	Action        string `json:"action"`
	// Who is the operator the change records (pause: in each lock; both: in each wake-up).
	Who     string      `json:"who"`
	Targets []ChangeRow `json:"targets"`
	// Undo is the command that undoes the change ("" when there is none: a resume).
	Undo string `json:"undo"`
	// Counts counts the targets by outcome, "failed" for those with an error.
	Counts map[string]int `json:"counts"`
}

// NewChangeDocument gathers the results of Pause or Resume (action "pause" or "resume"); the caller sets Who
// and Undo.
func NewChangeDocument(action string, results []Result[Change]) ChangeDocument {
	doc := ChangeDocument{SchemaVersion: schema.Version, Action: action, Targets: []ChangeRow{}, Counts: map[string]int{}}
	for _, r := range results {
		row := ChangeRow{TargetResult: targetResult(r), Change: r.Value}
		if r.Err != nil {
			row.Outcome = "failed"
		}
		doc.Counts[row.Outcome]++
		doc.Targets = append(doc.Targets, row)
	}
	return doc
}

// Failed returns the targets where the change failed.
func (d ChangeDocument) Failed() []TargetResult {
	var out []TargetResult
	for _, r := range d.Targets {
		if r.Error != "" {
			out = append(out, r.TargetResult)
		}
	}
	return out
}

// Refused returns the targets left short of what was asked (Refused outcomes: a shorter pause in place).
func (d ChangeDocument) Refused() []ChangeRow {
	var out []ChangeRow
	for _, r := range d.Targets {
		if r.Error == "" && Refused(r.Outcome) {
			out = append(out, r)
		}
	}
	return out
}

// WriteChanges renders the document: table (the detail cut to 100 runes), wide (the detail in full) or json.
func WriteChanges(w io.Writer, format string, d ChangeDocument) error {
	width := 100
	switch format {
	case "json":
		return writeJSON(w, d)
	case "wide":
		width = -1
	case "table":
	default:
		return fmt.Errorf("--output %q: want table, wide or json", format)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ACCOUNT\tNAME\tREGION\tOUTCOME\tWOKEN\tDETAIL")
	for _, r := range d.Targets {
		detail := r.Detail
		if r.Error != "" {
			detail = r.Error
		}
		if r.Warning != "" {
			detail += " (" + r.Warning + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, dash(r.Name), r.Region, r.Outcome, strconv.FormatBool(r.Woken), cut(dash(detail), width))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	keys := make([]string, 0, len(d.Counts))
	for k := range d.Counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, d.Counts[k]))
	}
	action := d.Action
	if d.Who != "" {
		action += " by " + d.Who
	}
	fmt.Fprintf(w, "\n%s in %d account-regions: %s\n", action, len(d.Targets), strings.Join(parts, ", "))
	writeFailed(w, "failed", d.Failed())
	if d.Undo != "" {
		fmt.Fprintf(w, "Undo with: %s\n", d.Undo)
	}
	return nil
}
