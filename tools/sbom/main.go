// Command sbom writes an SPDX 2.3 JSON software bill of materials for patch-agent binaries: the Go modules
// each binary links, read from the build information the Go toolchain embeds in it (what `go version -m`
// prints), with the licences internal/modlicense finds for them in the module cache. It needs no network
// and no generator beyond the Go toolchain. Run it from the repository root (scripts/release.sh does):
//
//	go run ./tools/sbom -version v1.2.3 -commit SHA -created 2026-12-01T00:00:00Z -o FILE BINARY...
package main

import (
	"debug/buildinfo"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"

	"github.com/patch-agent/patch-agent/internal/modlicense"
)

// repository is where the source of patch-agent lives: the download location of its package.
const repository = "https://github.com/patch-agent/patch-agent"

func main() {
	version := flag.String("version", "", "the release version, e.g. v1.2.3 (required)")
	commit := flag.String("commit", "", "the full commit id the binaries were built from (required)")
	created := flag.String("created", "", "when the document was created, RFC 3339 UTC (required; the build date, for a reproducible file)")
	out := flag.String("o", "", "the file to write (required)")
	flag.Parse()
	if err := run(*version, *commit, *created, *out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

func run(version, commit, created, out string, binaries []string) error {
	if version == "" || commit == "" || created == "" || out == "" || len(binaries) == 0 {
		return errors.New("usage: sbom -version V -commit SHA -created DATE -o FILE BINARY...")
	}
	var infos []*debug.BuildInfo
	for _, b := range binaries {
		bi, err := buildinfo.ReadFile(b)
		if err != nil {
			return fmt.Errorf("reading the Go build information of %s: %w", b, err)
		}
		infos = append(infos, bi)
	}
	linked, err := modlicense.Linked(modlicense.Production("."))
	if err != nil {
		return err
	}
	licences := map[string]string{}
	for _, m := range linked {
		licences[m.Path+"@"+m.Version] = m.Expression()
	}
	doc := build(version, commit, created, infos, licences)
	data, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, append(data, '\n'), 0o644)
}

// SPDX 2.3 JSON (spdx-spec v2.3, clauses 6 document creation, 7 package, 11 relationships).
type document struct {
	SPDXVersion       string         `json:"spdxVersion"`
	DataLicense       string         `json:"dataLicense"`
	SPDXID            string         `json:"SPDXID"`
	Name              string         `json:"name"`
	DocumentNamespace string         `json:"documentNamespace"`
	CreationInfo      creationInfo   `json:"creationInfo"`
	DocumentDescribes []string       `json:"documentDescribes"`
	Packages          []pkg          `json:"packages"`
	Relationships     []relationship `json:"relationships"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type pkg struct {
	Name             string        `json:"name"`
	SPDXID           string        `json:"SPDXID"`
	VersionInfo      string        `json:"versionInfo"`
	Supplier         string        `json:"supplier,omitempty"`
	DownloadLocation string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	Comment          string        `json:"comment,omitempty"`
	ExternalRefs     []externalRef `json:"externalRefs"`
}

type externalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type relationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

var notIDChar = regexp.MustCompile(`[^A-Za-z0-9.-]+`)

// purl is the package URL of a Go module (purl-spec, type golang).
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + url.PathEscape(version)
}

// build assembles the document: the patch-agent package (what it describes), the Go standard library and
// every module of the binaries (their union), each a dependency of patch-agent.
func build(version, commit, created string, infos []*debug.BuildInfo, licences map[string]string) document {
	const mainID = "SPDXRef-Package-patch-agent"
	mainPath := infos[0].Main.Path
	doc := document{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              "patch-agent-" + version,
		DocumentNamespace: repository + "/spdx/patch-agent-" + version + "-" + commit,
		CreationInfo: creationInfo{Created: created, Creators: []string{
			"Organization: The patch-agent authors", "Tool: patch-agent-tools-sbom",
		}},
		DocumentDescribes: []string{mainID},
	}
	doc.Packages = append(doc.Packages, pkg{
		Name: mainPath, SPDXID: mainID, VersionInfo: version,
		Supplier:         "Organization: The patch-agent authors",
		DownloadLocation: "git+" + repository + "@" + version,
		LicenseConcluded: "Apache-2.0", LicenseDeclared: "Apache-2.0", CopyrightText: "NOASSERTION",
		PrimaryPurpose: "APPLICATION",
		Comment:        "commit " + commit,
		ExternalRefs:   []externalRef{{"PACKAGE-MANAGER", "purl", purl(mainPath, version)}},
	})
	doc.Relationships = append(doc.Relationships, relationship{"SPDXRef-DOCUMENT", "DESCRIBES", mainID})

	goVersions := map[string]bool{}
	type module struct{ path, version, sum string }
	mods := map[string]module{}
	for _, bi := range infos {
		goVersions[bi.GoVersion] = true
		for _, d := range bi.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			mods[d.Path+"@"+d.Version] = module{d.Path, d.Version, d.Sum}
		}
	}
	for _, gv := range sortedKeys(goVersions) {
		id := "SPDXRef-Package-go-stdlib-" + notIDChar.ReplaceAllString(gv, "-")
		doc.Packages = append(doc.Packages, pkg{
			Name: "stdlib", SPDXID: id, VersionInfo: gv,
			DownloadLocation: "https://go.dev/dl/", LicenseConcluded: "BSD-3-Clause", LicenseDeclared: "BSD-3-Clause",
			CopyrightText: "NOASSERTION", Comment: "the Go standard library and runtime",
			ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + url.PathEscape(gv)}},
		})
		doc.Relationships = append(doc.Relationships, relationship{mainID, "DEPENDS_ON", id})
	}
	keys := make([]string, 0, len(mods))
	for k := range mods {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		m := mods[k]
		licence := licences[k]
		if licence == "" {
			licence = "NOASSERTION"
		}
		id := fmt.Sprintf("SPDXRef-Package-%d-%s", i+1, strings.Trim(notIDChar.ReplaceAllString(m.path, "-"), "-"))
		p := pkg{
			Name: m.path, SPDXID: id, VersionInfo: m.version,
			DownloadLocation: "https://proxy.golang.org/" + escapeModulePath(m.path) + "/@v/" + m.version + ".zip",
			LicenseConcluded: licence, LicenseDeclared: licence, CopyrightText: "NOASSERTION",
			ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", purl(m.path, m.version)}},
		}
		if m.sum != "" {
			p.Comment = "go.sum " + m.sum
		}
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, relationship{mainID, "DEPENDS_ON", id})
	}
	return doc
}

// escapeModulePath is the module proxy's case encoding: an upper-case letter becomes "!" and its lower case
// (Go modules reference, "Module proxy protocol").
func escapeModulePath(path string) string {
	var b strings.Builder
	for _, r := range path {
		if r >= 'A' && r <= 'Z' {
			b.WriteByte('!')
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
