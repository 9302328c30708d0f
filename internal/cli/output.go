package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/patch-agent/patch-agent/internal/schema"
)

// The formats of -o/--output. Every command that prints takes table (the default, fits 120 columns), wide
// (every column in full; the same as table where the table cuts nothing) and json (one document that starts
// with schemaVersion); the commands whose rows fit a spreadsheet also take csv.
const (
	FormatTable = "table"
	FormatWide  = "wide"
	FormatJSON  = "json"
	FormatCSV   = "csv"
)

// StandardFormats are the formats every printing command takes.
var StandardFormats = []string{FormatTable, FormatWide, FormatJSON}

// OutputValue is the value of -o/--output: one of formats, or a deprecated spelling of one (aliases: "text"
// for "table" where a command took text), which is accepted, stored as the format it stands for, and named
// on stderr before the command runs (NoteDeprecatedOutput).
type OutputValue struct {
	Value   string
	Formats []string
	aliases map[string]string
	// alias is the deprecated spelling given, "" when none.
	alias string
}

func (o *OutputValue) String() string { return o.Value }
func (o *OutputValue) Type() string   { return "format" }

// Set accepts a format or an alias; anything else is an error naming the formats (a usage error, exit 2).
func (o *OutputValue) Set(s string) error {
	if slices.Contains(o.Formats, s) {
		o.Value, o.alias = s, ""
		return nil
	}
	if f, ok := o.aliases[s]; ok {
		o.Value, o.alias = f, s
		return nil
	}
	return fmt.Errorf("want %s", OrList(o.Formats))
}

// Is reports whether the format chosen is one of formats.
func (o *OutputValue) Is(formats ...string) bool { return slices.Contains(formats, o.Value) }

// AddOutputFlag registers -o/--output on cmd with the formats it takes (def the default) and the deprecated
// aliases it still accepts; what says what the formats print, for the flag's help.
func AddOutputFlag(cmd *cobra.Command, def string, formats []string, aliases map[string]string, what string) *OutputValue {
	o := &OutputValue{Value: def, Formats: formats, aliases: aliases}
	help := "output format: " + OrList(formats)
	if what != "" {
		help += " (" + what + ")"
	}
	cmd.Flags().VarP(o, "output", "o", help)
	return o
}

// OutputOf returns the -o value of cmd, nil when it has none.
func OutputOf(cmd *cobra.Command) *OutputValue {
	f := cmd.Flags().Lookup("output")
	if f == nil {
		return nil
	}
	o, _ := f.Value.(*OutputValue)
	return o
}

// JSONAsked reports whether cmd was run with -o json (or its default is json, or the deprecated --json was
// given): the output a script reads as one JSON document. args are the command line as given: a usage
// error stops flag parsing where it is found, so the last -o/--output written there counts even when it
// was not parsed.
func JSONAsked(cmd *cobra.Command, args []string) bool {
	o := OutputOf(cmd)
	if o == nil || !slices.Contains(o.Formats, FormatJSON) {
		return false
	}
	if f := cmd.Flags().Lookup("json"); f != nil && f.Value.Type() == "bool" && f.Value.String() == "true" {
		return true
	}
	format := o.Value
	if given, ok := lastOutputArg(args); ok {
		format = given
	}
	return format == FormatJSON
}

// lastOutputArg returns the value of the last -o/--output in args (-o json, -ojson, -o=json, --output json,
// --output=json), up to a "--"; ok is false when there is none.
func lastOutputArg(args []string) (value string, ok bool) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return value, ok
		case a == "-o" || a == "--output":
			if i+1 < len(args) {
				value, ok = args[i+1], true
				i++
			}
		case strings.HasPrefix(a, "--output="):
			value, ok = strings.TrimPrefix(a, "--output="), true
		case strings.HasPrefix(a, "-o") && !strings.HasPrefix(a, "--"):
			value, ok = strings.TrimPrefix(strings.TrimPrefix(a, "-o"), "="), true
		}
	}
	return value, ok
}

// errorDocument is what a command run with -o json prints on stdout when it is refused or fails:
// {"schemaVersion": 1, "error": {"message": ..., "exitStatus": N}}. message is the error as stderr shows it
// after "patch-agent: "; exitStatus the process's exit status (1, 2, 3 or 130, as --help lists them).
type errorDocument struct {
	SchemaVersion int           `json:"schemaVersion"`
	Error         errorInDetail `json:"error"`
}

type errorInDetail struct {
	Message    string `json:"message"`
	ExitStatus int    `json:"exitStatus"`
}

// WriteErrorDocument prints err and its exit status code to w as an errorDocument. A failure to write is
// ignored: the error is on stderr and in the exit status already.
func WriteErrorDocument(w io.Writer, err error, code int) {
	_ = WritePlainJSON(w, errorDocument{SchemaVersion: schema.Version, Error: errorInDetail{Message: err.Error(), ExitStatus: code}})
}

// NoteDeprecatedOutput writes one line to w when cmd's -o was given a deprecated spelling.
func NoteDeprecatedOutput(cmd *cobra.Command, w io.Writer) {
	if o := OutputOf(cmd); o != nil && o.alias != "" {
		fmt.Fprintf(w, "patch-agent: -o %s is deprecated and will be removed: use -o %s\n", o.alias, o.Value)
	}
}

// DeprecationNotesOnStderr sends the note pflag writes when a deprecated flag is given ("Flag --json has been
// deprecated, use -o json instead") to the stderr of root's commands and of every command below it. Left to
// cobra, the note goes to the command's output, which is stdout once one is set (execute sets one): in the
// middle of an -o json document.
func DeprecationNotesOnStderr(root *cobra.Command) {
	root.Flags().SetOutput(stderrOf{root})
	for _, sub := range root.Commands() {
		DeprecationNotesOnStderr(sub)
	}
}

// stderrOf writes to its command's stderr as it is when written to (cobra's ErrOrStderr).
type stderrOf struct{ cmd *cobra.Command }

func (s stderrOf) Write(p []byte) (int, error) { return s.cmd.ErrOrStderr().Write(p) }

// OrList joins names as "a, b or c".
func OrList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// DeprecateFlag keeps the flag old of cmd working, hidden from --help, with a note on stderr naming what
// replaces it (cobra's MarkDeprecated).
func DeprecateFlag(fs *pflag.FlagSet, old, instead string) {
	if err := fs.MarkDeprecated(old, "use "+instead+" instead"); err != nil {
		panic(err) // a programming error: the flag is not registered
	}
}

// WritePlainJSON writes v as indented JSON without escaping <, > and & (details hold "1.30 -> 1.31").
func WritePlainJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
