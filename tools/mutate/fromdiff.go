package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// hunk is one hunk of a unified diff: the file, the first line of the old side, and its lines.
type hunk struct {
	file     string
	oldStart int
	lines    []Line
}

var hunkRE = regexp.MustCompile(`^@@ -(\d+)(?:,\d+)? \+\d+(?:,\d+)? @@`)

// parseDiff reads the hunks of a git unified diff and the header lines before its first "diff ".
func parseDiff(text string) (headers []string, hunks []hunk, err error) {
	var file string
	var cur *hunk
	inDiff := false
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "diff "):
			inDiff, cur = true, nil
		case !inDiff:
			headers = append(headers, line)
		case strings.HasPrefix(line, "+++ "):
			file = strings.TrimPrefix(strings.TrimPrefix(line, "+++ "), "b/")
		case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "index "):
		case strings.HasPrefix(line, "@@"):
			g := hunkRE.FindStringSubmatch(line)
			if g == nil {
				return nil, nil, fmt.Errorf("bad hunk header %q", line)
			}
			n, _ := strconv.Atoi(g[1])
			hunks = append(hunks, hunk{file: file, oldStart: n})
			cur = &hunks[len(hunks)-1]
		case cur != nil && line == "":
			cur.lines = append(cur.lines, Line{Op: ' '})
		case cur != nil && (line[0] == ' ' || line[0] == '-' || line[0] == '+'):
			cur.lines = append(cur.lines, Line{Op: line[0], Text: line[1:]})
		case strings.HasPrefix(line, `\ No newline`):
		default:
			return nil, nil, fmt.Errorf("unexpected diff line %q", line)
		}
	}
	return headers, hunks, nil
}

// FromDiff writes a diff (a patch that applies to the tree at root) as a mutant: each hunk becomes an edit of
// the declaration that holds its changed lines, with as little context as makes it unique there. Header lines
// before the diff are kept; "# kill-first:" becomes "# kill:".
func FromDiff(root, diff string) (string, error) {
	headers, hunks, err := parseDiff(diff)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, h := range headers {
		if strings.TrimSpace(h) == "" {
			continue
		}
		b.WriteString(strings.Replace(h, "# kill-first: ", "# kill: ", 1) + "\n")
	}
	b.WriteString("\n")
	for _, h := range hunks {
		e, err := hunkEdit(root, h)
		if err != nil {
			return "", fmt.Errorf("%s hunk at line %d: %w", h.file, h.oldStart, err)
		}
		fmt.Fprintf(&b, "@@ %s %s\n", e.Dir, e.Decl)
		for _, l := range e.Lines {
			b.WriteString(strings.TrimRight(string(l.Op)+l.Text, " ") + "\n")
		}
	}
	return b.String(), nil
}

// hunkEdit turns one hunk into an edit of the declaration around its changes.
func hunkEdit(root string, h hunk) (Edit, error) {
	first, last := -1, -1
	for i, l := range h.lines {
		if l.Op != ' ' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return Edit{}, fmt.Errorf("no change")
	}
	// The hunk's header line may be stale (git apply places a hunk at an offset): place its old side in the
	// file as git does, at the occurrence nearest the header's line.
	start, err := placeHunk(filepath.Join(root, h.file), h)
	if err != nil {
		return Edit{}, err
	}
	// Old-side line number of each hunk line (the line after, for an added one).
	oldNo := make([]int, len(h.lines))
	n := start
	for i, l := range h.lines {
		oldNo[i] = n
		if l.Op != '+' {
			n++
		}
	}
	anchor := oldNo[first]
	if h.lines[first].Op == '+' && first > 0 {
		anchor = oldNo[first-1]
	}
	to := anchor
	for i := first; i <= last; i++ {
		if h.lines[i].Op == '-' {
			to = oldNo[i]
		}
	}
	decl, sp, err := declAt(root, h.file, anchor, to)
	if err != nil {
		return Edit{}, err
	}
	src, err := os.ReadFile(sp.file)
	if err != nil {
		return Edit{}, err
	}
	lines := strings.Split(string(src), "\n")
	dir := path.Dir(h.file)
	lo, hi := first, last
	inside := func(i int) bool {
		return i >= 0 && i < len(h.lines) && h.lines[i].Op == ' ' && oldNo[i] >= sp.first && oldNo[i] <= sp.last
	}
	for before := true; ; before = !before {
		e := Edit{Dir: dir, Decl: decl, Lines: h.lines[lo : hi+1]}
		if _, err := applyEdit(lines, sp, e); err == nil {
			return e, nil
		}
		switch {
		case before && inside(lo-1):
			lo--
		case inside(hi + 1):
			hi++
		case inside(lo - 1):
			lo--
		default:
			return Edit{}, fmt.Errorf("cannot make the change unique inside %s", decl)
		}
	}
}

// declAt names the declaration of file that holds lines from..to.
func declAt(root, file string, from, to int) (string, span, error) {
	names, err := declNames(root, file)
	if err != nil {
		return "", span{}, err
	}
	for _, d := range names {
		if d.first <= from && to <= d.last {
			sp, err := findDecl(root, path.Dir(file), d.name)
			return d.name, sp, err
		}
	}
	return "", span{}, fmt.Errorf("lines %d-%d are not inside one declaration", from, to)
}

// placeHunk finds the 1-based line where h's old side (context and removed lines) starts in file, nearest
// the line its header names.
func placeHunk(file string, h hunk) (int, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	lines := strings.Split(string(b), "\n")
	var old []string
	for _, l := range h.lines {
		if l.Op != '+' {
			old = append(old, l.Text)
		}
	}
	best := -1
	for i := 0; i+len(old) <= len(lines); i++ {
		match := true
		for j, o := range old {
			if lines[i+j] != o {
				match = false
				break
			}
		}
		if match && (best < 0 || abs(i+1-h.oldStart) < abs(best-h.oldStart)) {
			best = i + 1
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("the hunk's old lines are not in %s", file)
	}
	return best, nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
