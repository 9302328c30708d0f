// Command mutate applies the safety mutants of testdata/mutants to a copy of the repository, by declaration
// name rather than by line (see Mutant), for scripts/mutants.sh.
//
//	mutate apply FILE.mutant          apply it to the tree in the current directory; exit 3 when it does not apply
//	mutate kills FILE.mutant          print its kill headers, one "package<TAB>regexp" a line
//	mutate header FILE.mutant KEY     print the values of one header, one a line
//	mutate from-diff FILE.patch       print a unified diff against the current tree as a mutant
//	mutate table FILE.mutant...       print docs/testing.md's table of mutants by invariant
package main

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		if IsNoApply(err) {
			os.Exit(3)
		}
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("usage: mutate apply|kills|header|from-diff|table FILE... (see the package comment)")
	}
	switch args[0] {
	case "apply":
		m, err := ReadMutant(args[1])
		if err != nil {
			return err
		}
		return Apply(".", m)
	case "kills":
		m, err := ReadMutant(args[1])
		if err != nil {
			return err
		}
		ks, err := m.Kills()
		if err != nil {
			return err
		}
		for _, k := range ks {
			fmt.Printf("%s\t%s\n", k.Pkg, k.Run)
		}
		return nil
	case "header":
		if len(args) != 3 {
			return fmt.Errorf("usage: mutate header FILE KEY")
		}
		m, err := ReadMutant(args[1])
		if err != nil {
			return err
		}
		for _, v := range m.Headers[args[2]] {
			fmt.Println(v)
		}
		return nil
	case "from-diff":
		b, err := os.ReadFile(args[1])
		if err != nil {
			return err
		}
		out, err := FromDiff(".", string(b))
		if err != nil {
			return fmt.Errorf("%s: %w", args[1], err)
		}
		fmt.Print(out)
		return nil
	case "table":
		return table(args[1:])
	}
	return fmt.Errorf("unknown command %q", args[0])
}

// table prints the curated mutants grouped by the invariant each breaks, with the tests that kill it.
func table(files []string) error {
	type row struct{ inv, name, why, kills string }
	var rows []row
	for _, f := range files {
		m, err := ReadMutant(f)
		if err != nil {
			return err
		}
		if !m.Curated() {
			continue
		}
		ks, err := m.Kills()
		if err != nil {
			return err
		}
		var kill []string
		for _, k := range ks {
			kill = append(kill, strings.TrimSuffix(strings.TrimPrefix(k.Pkg, "./"), "/")+": `"+k.Run+"`")
		}
		rows = append(rows, row{inv: first(m.Headers["invariant"]), name: m.Name, why: first(m.Headers["why"]), kills: strings.Join(kill, "; ")})
	}
	// Numbered invariants first, in their order, then the named groups (gates, checker, ...).
	key := func(inv string) string {
		if n, err := strconv.Atoi(inv); err == nil {
			return fmt.Sprintf("0%03d", n)
		}
		return "1" + inv
	}
	sort.SliceStable(rows, func(i, j int) bool { return key(rows[i].inv) < key(rows[j].inv) })
	fmt.Println("| invariant | mutant | the bug | killed first by |")
	fmt.Println("| --- | --- | --- | --- |")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s | %s |\n", r.inv, r.name, strings.ReplaceAll(r.why, "|", `\|`), strings.ReplaceAll(r.kills, "|", `\|`))
	}
	return nil
}

// Curated reports whether the mutant belongs to the set CI runs (`# set: curated`).
func (m *Mutant) Curated() bool {
	for _, s := range m.Headers["set"] {
		if s == "curated" {
			return true
		}
	}
	return false
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}
