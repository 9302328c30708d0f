package audit

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Output formats of Write.
const (
	FormatTable = "table"
	FormatJSON  = "json"
	FormatCSV   = "csv"
)

// Formats lists the output formats.
func Formats() []string { return []string{FormatTable, FormatJSON, FormatCSV} }

// CheckFormat returns an error naming the formats when format is none of them.
func CheckFormat(format string) error {
	for _, f := range Formats() {
		if format == f {
			return nil
		}
	}
	return fmt.Errorf("--output %q: want %s", format, strings.Join(Formats(), ", "))
}

// Write renders the report in format: a table with the summary and the groups' notes, indented JSON, or CSV
// with one row per group.
func Write(w io.Writer, format string, r *Report) error {
	switch format {
	case FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(r)
	case FormatCSV:
		return writeCSV(w, r)
	case FormatTable:
		return writeTable(w, r)
	}
	return CheckFormat(format)
}

// csvHeader names the CSV columns (docs/audit.md describes each).
var csvHeader = []string{"group", "platform", "cluster", "cluster_from", "nodegroup", "ami_source", "launch_template",
	"launch_configuration", "configured_image", "launch_image", "architecture", "instance_types", "instances",
	"outdated_instances", "in_use", "oldest_image", "recommended_parameter", "recommended_image",
	"recommended_released", "days_behind", "releases_behind", "status", "notes"}

func writeCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, g := range r.Groups {
		row := []string{g.Name, g.Platform, g.Cluster, g.ClusterFrom, g.Nodegroup, g.AMISource, g.LaunchTemplate,
			g.LaunchConfiguration, g.ConfiguredImage, g.LaunchImageID, g.Architecture, strings.Join(g.InstanceTypes, " "),
			strconv.Itoa(g.Instances), strconv.Itoa(g.OutdatedInstances), inUse(g.InUse), g.OldestImageID,
			g.RecommendedParameter, g.RecommendedImageID, dayOf(g.RecommendedReleased), formatCount(g.DaysBehind),
			formatCount(g.ReleasesBehind), g.Status, strings.Join(g.Notes, "; ")}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// inUse writes the AMIs in use as "ami-...(2) ami-...(1)" (instances on each), oldest first.
func inUse(uses []AMIUse) string {
	parts := make([]string, 0, len(uses))
	for _, u := range uses {
		parts = append(parts, fmt.Sprintf("%s(%d)", u.ImageID, u.Instances))
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tPLATFORM\tCLUSTER\tAMI SOURCE\tARCH\tINSTANCES\tOUTDATED\tOLDEST AMI\tRECOMMENDED AMI\tRELEASED\tDAYS\tRELEASES\tSTATUS")
	for _, g := range r.Groups {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Name, g.Platform, orDash(g.Cluster),
			g.AMISource, orDash(g.Architecture), g.Instances, g.OutdatedInstances, orDash(g.OldestImageID),
			orDash(g.RecommendedImageID), orDash(dayOf(g.RecommendedReleased)), formatCount(g.DaysBehind),
			formatCount(g.ReleasesBehind), g.Status)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := r.Summary
	fmt.Fprintf(w, "\n%s in %s: %d current, %d behind, %d empty, %d unknown; %d of %s outdated\n",
		plural(s.Groups, "group"), orDash(r.Region), s.Current, s.Behind, s.Empty, s.Unknown, s.OutdatedInstances,
		plural(s.Instances, "instance"))
	if s.MostBehind != "" {
		fmt.Fprintf(w, "most behind: %s, %d days\n", s.MostBehind, s.MostDaysBehind)
	}
	fmt.Fprintf(w, "AMI source: %s\n", counts(s.ByAMISource))
	fmt.Fprintf(w, "platform: %s\n", counts(s.ByPlatform))
	var notes []string
	for _, g := range r.Groups {
		for _, n := range g.Notes {
			notes = append(notes, fmt.Sprintf("  %s: %s", g.Name, n))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n%s\n", strings.Join(notes, "\n"))
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintf(w, "\nwarnings:\n  %s\n", strings.Join(r.Warnings, "\n  "))
	}
	return nil
}

// plural writes "1 group", "2 groups".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// counts writes "a 2, b 1" in key order.
func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}
