// Package modlicense finds the Go modules the production binary links and the licences they carry, from
// the module cache only (no network): `go list -deps` names the packages the build of ./cmd/patch-agent
// uses, and the licence files beside them are recognised by the wording each licence requires.
//
// scripts/licenses.sh writes docs/licenses.md and NOTICE from it; its tests fail when a linked module
// carries a licence outside Allowed or when those files no longer match what the build links.
package modlicense

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Allowed are the SPDX identifiers of the licences a linked module may carry: permissive licences whose
// conditions a binary distribution meets by shipping LICENSE, NOTICE and docs/licenses.md, and MPL-2.0,
// whose copyleft covers only the files of the module itself, which are distributed unchanged.
var Allowed = []string{"Apache-2.0", "MIT", "BSD-2-Clause", "BSD-3-Clause", "ISC", "MPL-2.0"}

// Module is one module the binary links, with the licences found in its licence files.
type Module struct {
	Path    string
	Version string
	// Dir is the module's directory in the module cache.
	Dir string
	// Licenses are the SPDX identifiers found, sorted; a module under more than one (parts of it under
	// each, as gopkg.in/yaml.v3) lists them all.
	Licenses []string
	// Files are the licence files read, relative to Dir.
	Files []string
	// Notices are the module's NOTICE files, relative to Dir: an Apache-2.0 work's NOTICE travels with
	// every redistribution (Apache License 2.0, section 4(d)).
	Notices []string
}

// Expression is the module's licences as an SPDX licence expression ("MIT AND Apache-2.0"): every one
// applies to some part of it.
func (m Module) Expression() string { return strings.Join(m.Licenses, " AND ") }

// Disallowed returns the module's licences that are not in Allowed.
func (m Module) Disallowed() []string {
	var out []string
	for _, id := range m.Licenses {
		if !slices.Contains(Allowed, id) {
			out = append(out, id)
		}
	}
	return out
}

// Build describes the build whose linked modules are listed.
type Build struct {
	// Dir is the main module's root directory.
	Dir string
	// Packages are the main packages built, e.g. ./cmd/patch-agent.
	Packages []string
	// Tags are the build tags, e.g. nodemo.
	Tags string
	// GOOS are the operating systems built for; the union of their dependencies is listed.
	GOOS []string
}

// Production is the build `make build`, `make image` and `make release` ship.
func Production(dir string) Build {
	return Build{Dir: dir, Packages: []string{"./cmd/patch-agent"}, Tags: "nodemo", GOOS: []string{"linux", "darwin"}}
}

// listedPackage is the part of `go list -json` read here.
type listedPackage struct {
	ImportPath string
	Dir        string
	Standard   bool
	Module     *listedModule
}

type listedModule struct {
	Path    string
	Version string
	Dir     string
	Main    bool
	Replace *listedModule
}

// Linked lists the modules the build links (the main module and the standard library left out), sorted by
// path, with their licences. It runs `go list -deps` with GOFLAGS=-mod=readonly and GOPROXY=off, so a module
// missing from the cache is an error rather than a download. It fails when a module has no licence file or
// one whose licence it does not recognise.
func Linked(b Build) ([]Module, error) {
	type acc struct {
		mod  listedModule
		dirs map[string]bool // package directories of the module that are linked
	}
	mods := map[string]*acc{}
	for _, goos := range b.GOOS {
		args := []string{"list", "-deps", "-json=ImportPath,Dir,Standard,Module"}
		if b.Tags != "" {
			args = append(args, "-tags", b.Tags)
		}
		args = append(args, b.Packages...)
		cmd := exec.Command("go", args...)
		cmd.Dir = b.Dir
		cmd.Env = append(os.Environ(), "GOOS="+goos, "CGO_ENABLED=0", "GOFLAGS=-mod=readonly", "GOPROXY=off")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("go list -deps for GOOS=%s (modules come from the module cache only; `go mod download` fills it): %w: %s", goos, err, strings.TrimSpace(stderr.String()))
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var p listedPackage
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				return nil, fmt.Errorf("reading go list output: %w", err)
			}
			if p.Standard || p.Module == nil || p.Module.Main {
				continue
			}
			m := *p.Module
			if m.Replace != nil {
				m = *m.Replace
			}
			key := m.Path + "@" + m.Version
			a := mods[key]
			if a == nil {
				a = &acc{mod: m, dirs: map[string]bool{}}
				mods[key] = a
			}
			a.dirs[p.Dir] = true
		}
	}
	var out []Module
	for _, a := range mods {
		if a.mod.Dir == "" {
			return nil, fmt.Errorf("module %s@%s is not in the module cache: run `go mod download`", a.mod.Path, a.mod.Version)
		}
		m, err := Identify(a.mod.Path, a.mod.Version, a.mod.Dir, keysOf(a.dirs))
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

func keysOf(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

var (
	licenseFile = regexp.MustCompile(`(?i)^(licen[cs]e|copying|unlicense)([.-].*)?$`)
	noticeFile  = regexp.MustCompile(`(?i)^notice(\.(txt|md))?$`)
)

// Identify reads the licence and NOTICE files of a module: those at its root and in every directory from the
// root down to each of pkgDirs (the directories of its linked packages; a vendored copy of another project
// in a subdirectory carries its own licence there). It fails when there is no licence file, or when a licence
// file holds no licence it recognises.
func Identify(path, version, dir string, pkgDirs []string) (Module, error) {
	m := Module{Path: path, Version: version, Dir: dir}
	dirs := map[string]bool{dir: true}
	for _, pd := range pkgDirs {
		rel, err := filepath.Rel(dir, pd)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for d := pd; d != dir && len(d) > len(dir); d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	ids := map[string]bool{}
	for _, d := range keysOf(dirs) {
		entries, err := os.ReadDir(d)
		if err != nil {
			return m, fmt.Errorf("module %s@%s: %w", path, version, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				continue
			}
			rel, _ := filepath.Rel(dir, filepath.Join(d, e.Name()))
			rel = filepath.ToSlash(rel)
			switch {
			case noticeFile.MatchString(e.Name()):
				m.Notices = append(m.Notices, rel)
			case licenseFile.MatchString(e.Name()):
				text, err := os.ReadFile(filepath.Join(d, e.Name()))
				if err != nil {
					return m, fmt.Errorf("module %s@%s: %w", path, version, err)
				}
				found := Recognize(string(text))
				if len(found) == 0 {
					return m, fmt.Errorf("module %s@%s: %s holds no licence this check recognises (allowed: %s): read it and extend Recognize or replace the module",
						path, version, rel, strings.Join(Allowed, ", "))
				}
				for _, id := range found {
					ids[id] = true
				}
				m.Files = append(m.Files, rel)
			}
		}
	}
	if len(m.Files) == 0 {
		return m, fmt.Errorf("module %s@%s has no licence file (LICENSE, COPYING ...) in %s", path, version, dir)
	}
	m.Licenses = keysOf(ids)
	return m, nil
}

// Each licence is recognised by wording its text must keep (the grant, or the title and version); text is
// compared lower-cased with runs of white space, comment markers (//, #, *) and quote markers (>) folded to one space.
var (
	apacheTitle  = regexp.MustCompile(`apache license,? version 2\.0`)
	apacheFull   = regexp.MustCompile(`apache license version 2\.0, january 2004`)
	mitGrant     = regexp.MustCompile(`permission is hereby granted, free of charge, to any person obtaining a copy`)
	iscGrant     = regexp.MustCompile(`permission to use, copy, modify, and(/or)? distribute this software for any purpose with or without fee is hereby granted`)
	bsdGrant     = regexp.MustCompile(`redistribution and use in source and binary forms, with or without modification, are permitted provided that`)
	bsdEndorse   = regexp.MustCompile(`(neither the name|names of its contributors|name of the copyright holder).{0,200}(may|must)( not)? be used to endorse or promote`)
	bsdAdvertise = regexp.MustCompile(`all advertising materials mentioning features or use of this software`)
	mpl2         = regexp.MustCompile(`mozilla public license,? (version|v\.?) ?2\.0`)
	gpl          = regexp.MustCompile(`gnu (affero |lesser |library )?general public license`)
	folding      = regexp.MustCompile(`(?:\s|//+|#|\*|>)+`)
)

// Recognize returns the SPDX identifiers of the licences a licence file's text holds, sorted. A copyleft or
// advertising-clause licence is returned under its own identifier (GPL, LGPL, AGPL, BSD-4-Clause), so that
// the allow list refuses it; a text with none of them returns nothing.
func Recognize(text string) []string {
	t := strings.TrimSpace(folding.ReplaceAllString(strings.ToLower(text), " "))
	ids := map[string]bool{}
	if apacheTitle.MatchString(t) || apacheFull.MatchString(t) {
		ids["Apache-2.0"] = true
	}
	if mitGrant.MatchString(t) {
		ids["MIT"] = true
	}
	if iscGrant.MatchString(t) {
		ids["ISC"] = true
	}
	if bsdGrant.MatchString(t) {
		switch {
		case bsdAdvertise.MatchString(t):
			ids["BSD-4-Clause"] = true
		case bsdEndorse.MatchString(t):
			ids["BSD-3-Clause"] = true
		default:
			ids["BSD-2-Clause"] = true
		}
	}
	if mpl2.MatchString(t) {
		ids["MPL-2.0"] = true
	}
	// The MPL names the GNU licences as its secondary licences: only a text that is not the MPL is read for them.
	if m := gpl.FindStringSubmatch(t); m != nil && !ids["MPL-2.0"] {
		switch strings.TrimSpace(m[1]) {
		case "affero":
			ids["AGPL"] = true
		case "lesser", "library":
			ids["LGPL"] = true
		default:
			ids["GPL"] = true
		}
	}
	return keysOf(ids)
}

// Check returns an error naming every module whose licences are not all in Allowed.
func Check(mods []Module) error {
	var errs []error
	for _, m := range mods {
		if bad := m.Disallowed(); len(bad) > 0 {
			errs = append(errs, fmt.Errorf("module %s@%s is under %s (%s), not in the allow list %s",
				m.Path, m.Version, strings.Join(bad, ", "), strings.Join(m.Files, ", "), strings.Join(Allowed, ", ")))
		}
	}
	return errors.Join(errs...)
}
