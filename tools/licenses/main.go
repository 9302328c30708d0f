// Command licenses lists the licences of the Go modules the production binary links (internal/modlicense)
// and writes docs/licenses.md and NOTICE, or with -check verifies both are current and every licence is
// allowed. It reads the module cache only. Run it from the repository root (scripts/licenses.sh does).
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/patch-agent/patch-agent/internal/modlicense"
)

func main() {
	check := flag.Bool("check", false, "write nothing: fail when a licence is not allowed or docs/licenses.md or NOTICE is out of date")
	doc := flag.String("doc", "docs/licenses.md", "the licence list to write or check")
	notice := flag.String("notice", "NOTICE", "the NOTICE file to write or check")
	flag.Parse()
	if err := run(*check, *doc, *notice); err != nil {
		fmt.Fprintln(os.Stderr, "licenses:", err)
		os.Exit(1)
	}
}

func run(check bool, docPath, noticePath string) error {
	mods, err := modlicense.Linked(modlicense.Production("."))
	if err != nil {
		return err
	}
	if err := modlicense.Check(mods); err != nil {
		return err
	}
	doc := modlicense.Markdown(mods)
	notice, err := modlicense.Notice(mods)
	if err != nil {
		return err
	}
	for _, f := range []struct{ path, want string }{{docPath, doc}, {noticePath, notice}} {
		if check {
			got, err := os.ReadFile(f.path)
			if err != nil {
				return fmt.Errorf("%w: run scripts/licenses.sh", err)
			}
			if string(got) != f.want {
				return fmt.Errorf("%s is out of date with the modules the binary links: run scripts/licenses.sh and commit it", f.path)
			}
			continue
		}
		if err := os.WriteFile(f.path, []byte(f.want), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("%d linked modules, every licence allowed (%s)\n", len(mods), map[bool]string{true: "files current", false: "files written"}[check])
	return nil
}
