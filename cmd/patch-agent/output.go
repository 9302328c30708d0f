package main

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The formats of -o/--output. Every command that prints takes table (the default, fits 120 columns), wide
// (every column in full; the same as table where the table cuts nothing) and json (one document that starts
// with schemaVersion); the commands whose rows fit a spreadsheet also take csv.
const (
	formatTable = "table"
	formatWide  = "wide"
	formatJSON  = "json"
	formatCSV   = "csv"
)

// standardFormats are the formats every printing command takes.
var standardFormats = []string{formatTable, formatWide, formatJSON}

// outputValue is the value of -o/--output: one of formats, or a deprecated spelling of one (aliases: "text"
// for "table" where a command took text), which is accepted, stored as the format it stands for, and named
// on stderr before the command runs (noteDeprecatedOutput).
type outputValue struct {
	value   string
	formats []string
	aliases map[string]string
	// alias is the deprecated spelling given, "" when none.
	alias string
}

func (o *outputValue) String() string { return o.value }
func (o *outputValue) Type() string   { return "format" }

// Set accepts a format or an alias; anything else is an error naming the formats (a usage error, exit 2).
func (o *outputValue) Set(s string) error {
	if slices.Contains(o.formats, s) {
		o.value, o.alias = s, ""
		return nil
	}
	if f, ok := o.aliases[s]; ok {
		o.value, o.alias = f, s
		return nil
	}
	return fmt.Errorf("want %s", orList(o.formats))
}

// is reports whether the format chosen is one of formats.
func (o *outputValue) is(formats ...string) bool { return slices.Contains(formats, o.value) }

// addOutputFlag registers -o/--output on cmd with the formats it takes (def the default) and the deprecated
// aliases it still accepts; what says what the formats print, for the flag's help.
func addOutputFlag(cmd *cobra.Command, def string, formats []string, aliases map[string]string, what string) *outputValue {
	o := &outputValue{value: def, formats: formats, aliases: aliases}
	help := "output format: " + orList(formats)
	if what != "" {
		help += " (" + what + ")"
	}
	cmd.Flags().VarP(o, "output", "o", help)
	return o
}

// outputOf returns the -o value of cmd, nil when it has none.
func outputOf(cmd *cobra.Command) *outputValue {
	f := cmd.Flags().Lookup("output")
	if f == nil {
		return nil
	}
	o, _ := f.Value.(*outputValue)
	return o
}

// noteDeprecatedOutput writes one line to w when cmd's -o was given a deprecated spelling.
func noteDeprecatedOutput(cmd *cobra.Command, w io.Writer) {
	if o := outputOf(cmd); o != nil && o.alias != "" {
		fmt.Fprintf(w, "patch-agent: -o %s is deprecated and will be removed: use -o %s\n", o.alias, o.value)
	}
}

// orList joins names as "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// deprecateFlag keeps the flag old of cmd working, hidden from --help, with a note on stderr naming what
// replaces it (cobra's MarkDeprecated).
func deprecateFlag(fs *pflag.FlagSet, old, instead string) {
	if err := fs.MarkDeprecated(old, "use "+instead+" instead"); err != nil {
		panic(err) // a programming error: the flag is not registered
	}
}
