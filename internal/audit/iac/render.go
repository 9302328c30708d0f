package iac

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/patch-agent/patch-agent/internal/audit"
	"github.com/patch-agent/patch-agent/internal/schema"
)

// MarshalJSON writes the report as the document of `audit --iac -o json`: schemaVersion (schema.Version)
// first, every field present ([] for no rows).
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without the method
	if r.Paths == nil {
		r.Paths = []string{}
	}
	if r.Findings == nil {
		r.Findings = []Finding{}
	}
	if r.Practices == nil {
		r.Practices = []Practice{}
	}
	if r.Warnings == nil {
		r.Warnings = []Warning{}
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		SchemaVersion int `json:"schemaVersion"`
		plain
	}{schema.Version, plain(r)}); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// Write renders the report in format (audit.FormatTable, audit.FormatJSON or audit.FormatCSV): a table of
// the findings with the practices, the modules and stacks not followed and the warnings after it; indented
// JSON; or CSV with one row per finding. An unknown format is the error of audit.CheckFormat.
func Write(w io.Writer, format string, r *Report) error {
	switch format {
	case audit.FormatJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false)
		return enc.Encode(r)
	case audit.FormatCSV:
		return writeCSV(w, r)
	case audit.FormatTable:
		return writeTable(w, r)
	}
	return audit.CheckFormat(format)
}

// CSVHeader names the CSV columns (docs/audit.md describes each).
var CSVHeader = []string{"file", "line", "resource", "resource_type", "resource_file", "resource_line", "attribute", "image_id",
	"via", "kind", "note", "image_name", "owner", "created", "age_days", "architecture", "os_family", "deprecated",
	"recommended_parameter"}

func writeCSV(w io.Writer, r *Report) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	for _, f := range r.Findings {
		row := []string{f.File, strconv.Itoa(f.Line), f.Resource, f.ResourceType, f.ResourceFile, strconv.Itoa(f.ResourceLine),
			f.Attribute, f.ImageID, f.Via, f.Kind, f.Note}
		if img := f.Image; img != nil {
			created, age := "", ""
			if img.Created != nil {
				created = img.Created.Format("2006-01-02")
			}
			if img.AgeDays != nil {
				age = strconv.Itoa(*img.AgeDays)
			}
			row = append(row, img.Name, img.Owner, created, age, img.Architecture, img.OSFamily, strconv.FormatBool(img.Deprecated))
		} else {
			row = append(row, "", "", "", "", "", "", "")
		}
		row = append(row, f.RecommendedParameter)
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func writeTable(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if r.Offline {
		fmt.Fprintln(tw, "FILE:LINE\tRESOURCE\tAMI\tVIA")
	} else {
		fmt.Fprintln(tw, "FILE:LINE\tRESOURCE\tAMI\tVIA\tAGE\tOS\tRECOMMENDED PARAMETER")
	}
	for _, f := range r.Findings {
		line := fmt.Sprintf("%s:%d\t%s\t%s\t%s", f.File, f.Line, f.Resource, f.ImageID, f.Via)
		if !r.Offline {
			age, os := "unknown", "unknown"
			if f.Image != nil {
				os = f.Image.OSFamily
				if f.Image.AgeDays != nil {
					age = strconv.Itoa(*f.Image.AgeDays) + "d"
				}
			}
			line += fmt.Sprintf("\t%s\t%s\t%s", age, os, dash(f.RecommendedParameter))
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := r.Summary
	fmt.Fprintf(w, "\n%d hard-coded AMI reference(s) of %d AMI(s); %d following a parameter; %d file(s), %d line(s) read",
		s.Findings, s.Images, s.Practices, s.Files, s.Lines)
	if r.Offline {
		fmt.Fprintf(w, "; offline (%s): no AMI facts", r.OfflineReason)
	}
	fmt.Fprintln(w)
	var notes []string
	for _, f := range r.Findings {
		if f.Note != "" {
			notes = append(notes, fmt.Sprintf("  %s:%d %s: %s", f.File, f.Line, f.Resource, f.Note))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintf(w, "\nnotes:\n%s\n", strings.Join(notes, "\n"))
	}
	if len(r.Practices) > 0 {
		fmt.Fprintln(w, "\nfollowing a parameter (current practice):")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, p := range r.Practices {
			fmt.Fprintf(tw, "  %s:%d\t%s\t%s\t%s\t%s\n", p.File, p.Line, p.Resource, p.Attribute, p.Source, p.Detail)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(r.Warnings) > 0 {
		fmt.Fprintln(w, "\nwarnings:")
		for _, wn := range r.Warnings {
			fmt.Fprintf(w, "  %s\n", wn)
		}
	}
	return nil
}
