package demo

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// lineWidth is the most runes a line of the demo's narrative takes, a terminal of 120 columns: a longer line
// goes on below, broken between words, so that nothing is cut.
const lineWidth = 120

// continuationIndent is how much further than its text a line's continuation starts: readers see it belongs
// to the line above, and the tests join a line that starts with at least that many spaces to the one above.
const continuationIndent = 4

// writeWrapped writes prefix+text (prefix: a time stamp, or the indent of a summary line) as lines of at most
// lineWidth runes, each continuation indented continuationIndent past prefix. When the text does not fit on one
// line and contains breakAt, the part from breakAt on starts a continuation line of its own (a progress
// line's reason goes below its counts).
func writeWrapped(out io.Writer, prefix, text, breakAt string) {
	indent := strings.Repeat(" ", utf8.RuneCountInString(prefix)+continuationIndent)
	parts := []string{text}
	if breakAt != "" && utf8.RuneCountInString(prefix+text) > lineWidth {
		if i := strings.Index(text, breakAt); i > 0 {
			parts = []string{strings.TrimRight(text[:i], " "), strings.TrimLeft(text[i:], " ")}
		}
	}
	lines := wrapText(prefix+parts[0], lineWidth, indent)
	for _, part := range parts[1:] {
		lines = append(lines, wrapText(indent+part, lineWidth, indent)...)
	}
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
}

// wrapText breaks s into lines of at most width runes at spaces, every line after the first starting with
// indent. The spaces inside a line are kept as they are (a progress line's padded columns), the leading ones
// (an indent) are never a break, and a word longer than the room left stays whole, past width.
func wrapText(s string, width int, indent string) []string {
	var out []string
	r := []rune(s)
	for {
		if len(r) <= width {
			return append(out, string(r))
		}
		start := 0
		for start < len(r) && r[start] == ' ' {
			start++
		}
		cut := -1
		for i := width; i > start; i-- {
			if r[i] == ' ' {
				cut = i
				break
			}
		}
		if cut < 0 { // one word longer than the line: it ends at the next space
			for i := width + 1; i < len(r); i++ {
				if r[i] == ' ' {
					cut = i
					break
				}
			}
		}
		if cut < 0 {
			return append(out, string(r))
		}
		out = append(out, strings.TrimRight(string(r[:cut]), " "))
		rest := strings.TrimLeft(string(r[cut:]), " ")
		if rest == "" {
			return out
		}
		r = []rune(indent + rest)
	}
}
