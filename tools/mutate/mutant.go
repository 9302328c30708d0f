package main

import (
	"bufio"
	"errors"
	"fmt"
	"go/ast"
	"go/build"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Mutant is one deliberate bug, read from a testdata/mutants/*.mutant file:
//
//	# why: a rollout terminates the old instance without waiting for its drain
//	# invariant: 2
//	# set: curated
//	# kill: ./internal/eksdrain/ -run '^TestC9PodDisruptionBudgetMinAvailableEqualsReplicasHaltsAtTheDrainDeadlineAndTheOldNodeKeepsServing$'
//
//	@@ internal/lifecycleaction (*Hooks).drain
//	 	prog, err := platform.DrainStatus(ctx, t.Cluster, rec.InstanceID)
//	-	if err != nil || prog.Drained {
//	+	if err != nil || prog.Drained || true { // mutant
//
// Each edit names a package directory and a declaration in it (a function, a method as (*T).M or (T).M, or a
// type, var or const by name); its lines are those of a unified diff hunk without line numbers (' ' context,
// '-' removed, '+' added). The context and removed lines must occur exactly once inside the declaration,
// compared with their leading and trailing blanks trimmed, so the mutant survives code moving within a file,
// between files of the package and re-indentation, and fails, never passes, when the function is renamed or
// the lines it breaks are gone.
type Mutant struct {
	Name    string
	Headers map[string][]string // "why", "invariant", "set", "kill", ...
	Edits   []Edit
}

// Edit is one change inside one declaration.
type Edit struct {
	Dir   string // package directory, slash-separated, relative to the repository root
	Decl  string // declaration name as written after @@
	Lines []Line
}

// Line is one line of an edit: Op is ' ', '-' or '+'.
type Line struct {
	Op   byte
	Text string
}

// Kill is one `# kill:` header: the package and -run pattern expected to kill the mutant.
type Kill struct {
	Pkg, Run string
}

var killRE = regexp.MustCompile(`^(\./[A-Za-z0-9_/.-]+) -run '([^']+)'$`)

// Kills parses the mutant's kill headers; a header of another form is an error.
func (m *Mutant) Kills() ([]Kill, error) {
	var ks []Kill
	for _, h := range m.Headers["kill"] {
		g := killRE.FindStringSubmatch(h)
		if g == nil {
			return nil, fmt.Errorf("%s: kill header %q is not of the form ./pkg/ -run 'regexp'", m.Name, h)
		}
		ks = append(ks, Kill{Pkg: g[1], Run: g[2]})
	}
	return ks, nil
}

// ReadMutant parses a .mutant file. Errors name the file and line.
func ReadMutant(path string) (*Mutant, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &Mutant{Name: strings.TrimSuffix(filepath.Base(path), ".mutant"), Headers: map[string][]string{}}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	n := 0
	var cur *Edit
	for sc.Scan() {
		n++
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "@@ "):
			f := strings.Fields(strings.TrimPrefix(line, "@@ "))
			if len(f) != 2 {
				return nil, fmt.Errorf("%s:%d: want \"@@ <package dir> <declaration>\", got %q", path, n, line)
			}
			m.Edits = append(m.Edits, Edit{Dir: strings.TrimPrefix(strings.TrimSuffix(f[0], "/"), "./"), Decl: f[1]})
			cur = &m.Edits[len(m.Edits)-1]
		case cur == nil && strings.HasPrefix(line, "# "):
			k, v, ok := strings.Cut(strings.TrimPrefix(line, "# "), ": ")
			if !ok {
				return nil, fmt.Errorf("%s:%d: header %q is not \"# key: value\"", path, n, line)
			}
			m.Headers[k] = append(m.Headers[k], v)
		case cur == nil && strings.TrimSpace(line) == "":
		case cur == nil:
			return nil, fmt.Errorf("%s:%d: %q before the first @@ edit", path, n, line)
		case line == "":
			cur.Lines = append(cur.Lines, Line{Op: ' '})
		case line[0] == ' ' || line[0] == '-' || line[0] == '+':
			cur.Lines = append(cur.Lines, Line{Op: line[0], Text: line[1:]})
		default:
			return nil, fmt.Errorf("%s:%d: an edit line starts with ' ', '-' or '+', got %q", path, n, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(m.Edits) == 0 {
		return nil, fmt.Errorf("%s: no @@ edit", path)
	}
	for _, e := range m.Edits {
		changed := false
		for _, l := range e.Lines {
			changed = changed || l.Op != ' '
		}
		if !changed {
			return nil, fmt.Errorf("%s: edit of %s %s changes nothing", path, e.Dir, e.Decl)
		}
	}
	return m, nil
}

// NoApplyError says why a mutant does not apply to the code: its declaration is gone or renamed, or its lines
// are not found, or found more than once, inside it.
type NoApplyError struct{ Msg string }

func (e *NoApplyError) Error() string { return e.Msg }

func noApply(format string, a ...any) error { return &NoApplyError{Msg: fmt.Sprintf(format, a...)} }

// span is a declaration's place: its file and its first and last line (1-based, inclusive).
type span struct {
	file        string
	first, last int
}

// findDecl finds the one declaration named decl among the non-test Go files of dir.
func findDecl(root, dir, decl string) (span, error) {
	recv, name := splitDecl(decl)
	files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
	if err != nil {
		return span{}, err
	}
	sort.Strings(files)
	var found []span
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		// Only the files this platform builds (build tags, _linux/_other suffixes): a declaration that exists
		// once per platform is one declaration here.
		if ok, err := build.Default.MatchFile(filepath.Dir(path), filepath.Base(path)); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return span{}, noApply("parsing %s: %v", path, err)
		}
		add := func(n ast.Node) {
			found = append(found, span{file: path, first: fset.Position(n.Pos()).Line, last: fset.Position(n.End()).Line})
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Name.Name == name && receiverName(d) == recv {
					add(d)
				}
			case *ast.GenDecl:
				if recv != "" {
					continue
				}
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.Name == name {
							add(s)
						}
					case *ast.ValueSpec:
						for _, id := range s.Names {
							if id.Name == name {
								add(s)
							}
						}
					}
				}
			}
		}
	}
	switch len(found) {
	case 0:
		return span{}, noApply("%s: no declaration %s (renamed, moved to another package or deleted: write the mutant again against the code)", dir, decl)
	case 1:
		return found[0], nil
	default:
		return span{}, noApply("%s: %d declarations named %s", dir, len(found), decl)
	}
}

// splitDecl splits "(*T).M", "(T).M" or "T.M" into ("T", "M"), and "F" into ("", "F").
func splitDecl(decl string) (recv, name string) {
	i := strings.LastIndex(decl, ".")
	if i < 0 {
		return "", decl
	}
	recv = strings.Trim(decl[:i], "()*")
	if j := strings.Index(recv, "["); j >= 0 { // (*Set[K]).Has names the method of Set
		recv = recv[:j]
	}
	return recv, decl[i+1:]
}

func receiverName(d *ast.FuncDecl) string {
	if d.Recv == nil || len(d.Recv.List) == 0 {
		return ""
	}
	t := d.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// Apply applies every edit of m to the tree at root, writing the files it changes. An edit that cannot be
// placed is a *NoApplyError; nothing is written then.
func Apply(root string, m *Mutant) error {
	files, err := Plan(root, m)
	if err != nil {
		return err
	}
	for path, text := range files {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Plan returns the text of every file m changes, by path, without writing: what Apply would write.
func Plan(root string, m *Mutant) (map[string]string, error) {
	contents := map[string][]string{}
	for _, e := range m.Edits {
		sp, err := findDecl(root, e.Dir, e.Decl)
		if err != nil {
			return nil, err
		}
		lines, ok := contents[sp.file]
		if !ok {
			b, err := os.ReadFile(sp.file)
			if err != nil {
				return nil, err
			}
			lines = strings.Split(string(b), "\n")
		} else {
			// Lines added by an earlier edit of the same file move the declaration: find it again in the
			// edited text.
			if sp, err = findDeclIn(sp.file, strings.Join(lines, "\n"), e); err != nil {
				return nil, err
			}
		}
		out, err := applyEdit(lines, sp, e)
		if err != nil {
			return nil, err
		}
		contents[sp.file] = out
	}
	files := map[string]string{}
	changed := false
	for path, lines := range contents {
		files[path] = strings.Join(lines, "\n")
		before, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		changed = changed || !sameTokens(before, []byte(files[path]))
	}
	// A mutant whose lines landed only in a comment (its real line changed, a comment still holds the old text)
	// would change nothing and be reported as a survivor: it does not apply. The null mutant is meant to.
	if !changed && !m.Null() {
		return nil, noApply("%s changes only comments: the code it broke is gone, write the mutant again against the code", m.Name)
	}
	return files, nil
}

// Null reports whether the mutant is meant to change nothing that runs (the null mutant, `# invariant: -`).
func (m *Mutant) Null() bool { return m.Name == "00-null" || first(m.Headers["invariant"]) == "-" }

// sameTokens reports whether two Go sources have the same tokens, comments left out.
func sameTokens(a, b []byte) bool {
	scan := func(src []byte) []string {
		fset := token.NewFileSet()
		var s scanner.Scanner
		s.Init(fset.AddFile("", fset.Base(), len(src)), src, nil, 0)
		var out []string
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				return out
			}
			out = append(out, tok.String()+lit)
		}
	}
	ta, tb := scan(a), scan(b)
	if len(ta) != len(tb) {
		return false
	}
	for i := range ta {
		if ta[i] != tb[i] {
			return false
		}
	}
	return true
}

// findDeclIn finds e's declaration again in src, the text of file after earlier edits.
func findDeclIn(file, src string, e Edit) (span, error) {
	dir, err := os.MkdirTemp("", "mutate")
	if err != nil {
		return span{}, err
	}
	defer os.RemoveAll(dir)
	if err := os.WriteFile(filepath.Join(dir, filepath.Base(file)), []byte(src), 0o644); err != nil {
		return span{}, err
	}
	sp, err := findDecl(dir, ".", e.Decl)
	sp.file = file
	return sp, err
}

// applyEdit replaces the one occurrence of e's old lines inside sp with its new lines.
func applyEdit(lines []string, sp span, e Edit) ([]string, error) {
	var old []string
	for _, l := range e.Lines {
		if l.Op != '+' {
			old = append(old, strings.TrimSpace(l.Text))
		}
	}
	var at []int
	if len(old) == 0 {
		return nil, noApply("%s %s: an edit needs at least one context or removed line to place it", e.Dir, e.Decl)
	}
	for i := sp.first - 1; i+len(old) <= sp.last && i+len(old) <= len(lines); i++ {
		match := true
		for j, o := range old {
			if strings.TrimSpace(lines[i+j]) != o {
				match = false
				break
			}
		}
		if match {
			at = append(at, i)
		}
	}
	switch len(at) {
	case 0:
		return nil, noApply("%s %s: its lines are not in the declaration (%s:%d-%d): the code changed, write the mutant again", e.Dir, e.Decl, filepath.Base(sp.file), sp.first, sp.last)
	case 1:
	default:
		return nil, noApply("%s %s: its lines occur %d times in the declaration: add context", e.Dir, e.Decl, len(at))
	}
	var repl []string
	k := at[0]
	for _, l := range e.Lines {
		switch l.Op {
		case ' ':
			repl = append(repl, lines[k])
			k++
		case '-':
			k++
		case '+':
			repl = append(repl, l.Text)
		}
	}
	out := append([]string{}, lines[:at[0]]...)
	out = append(out, repl...)
	return append(out, lines[k:]...), nil
}

// IsNoApply reports whether err says the mutant does not apply.
func IsNoApply(err error) bool {
	var n *NoApplyError
	return errors.As(err, &n)
}

// namedSpan is a declaration's name, as an edit writes it, and its lines.
type namedSpan struct {
	name        string
	first, last int
}

// declNames lists the top-level declarations of one file with their lines.
func declNames(root, file string) ([]namedSpan, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join(root, file), nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []namedSpan
	add := func(name string, n ast.Node) {
		out = append(out, namedSpan{name: name, first: fset.Position(n.Pos()).Line, last: fset.Position(n.End()).Line})
	}
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if r := receiverName(d); r != "" {
				star := ""
				if _, ok := d.Recv.List[0].Type.(*ast.StarExpr); ok {
					star = "*"
				}
				name = "(" + star + r + ")." + name
			}
			add(name, d)
		case *ast.GenDecl:
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					add(s.Name.Name, s)
				case *ast.ValueSpec:
					add(s.Names[0].Name, s)
				}
			}
		}
	}
	return out, nil
}
