package iac

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	yaml "go.yaml.in/yaml/v3"
)

// skipDirs are directories a scan never enters: provider and module caches, dependencies, version control.
var skipDirs = map[string]bool{".terraform": true, ".terragrunt-cache": true, "node_modules": true, ".git": true}

// maxDepth bounds how deep references, modules and nested stacks are followed (a cycle ends there too).
const maxDepth = 32

// scan is one run of Scanner.Scan: the files read, what they declare, and the rows found.
type scan struct {
	fsys         fs.FS
	files, lines int
	// modules are the Terraform modules by directory: every directory holding .tf or .tf.json files that was
	// walked or that a module call or terragrunt source names.
	modules  map[string]*tfModule
	modOrder []string
	// tfvars are the variable files by directory.
	tfvars     map[string][]*tfvarsFile
	terragrunt []*tgFile
	// templates are the CloudFormation templates by file; tplOrder the order they were read.
	templates map[string]*cfnTemplate
	tplOrder  []string
	contexts  []*cdkContext
	// read marks the files already read (a module or nested stack named from elsewhere is read once).
	read map[string]bool

	findings    []Finding
	practices   []Practice
	warnings    []Warning
	seenFinding map[string]bool
	seenPract   map[string]bool
	seenWarning map[string]bool
}

func newScan(fsys fs.FS) *scan {
	return &scan{fsys: fsys, modules: map[string]*tfModule{}, tfvars: map[string][]*tfvarsFile{}, templates: map[string]*cfnTemplate{},
		read: map[string]bool{}, seenFinding: map[string]bool{}, seenPract: map[string]bool{}, seenWarning: map[string]bool{}}
}

func (sc *scan) warn(file string, line int, format string, args ...any) {
	w := Warning{File: file, Line: line, Message: fmt.Sprintf(format, args...)}
	if k := w.String(); !sc.seenWarning[k] {
		sc.seenWarning[k] = true
		sc.warnings = append(sc.warnings, w)
	}
}

// walk reads every file of interest under root (a directory or one file).
func (sc *scan) walk(root string) error {
	info, err := fs.Stat(sc.fsys, root)
	if err != nil {
		return fmt.Errorf("reading %s: %w", root, err)
	}
	if !info.IsDir() {
		sc.readFile(root)
		return nil
	}
	return fs.WalkDir(sc.fsys, root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return fmt.Errorf("reading %s: %w", root, err)
			}
			sc.warn(p, 0, "cannot read: %v", err)
			if d != nil && d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			if p != root && skipDirs[d.Name()] {
				return fs.SkipDir
			}
			return nil
		}
		sc.readFile(p)
		return nil
	})
}

// fileKind tells what a file is by its name ("" for a file of no interest).
func fileKind(name string) string {
	base := path.Base(name)
	switch {
	case strings.HasSuffix(base, ".tf"):
		return "tf"
	case strings.HasSuffix(base, ".tf.json"):
		return "tf.json"
	case strings.HasSuffix(base, ".tfvars"):
		return "tfvars"
	case strings.HasSuffix(base, ".tfvars.json"):
		return "tfvars.json"
	case base == "terragrunt.hcl":
		return "terragrunt"
	case base == "cdk.context.json":
		return "cdk.context"
	case strings.HasSuffix(base, ".yaml"), strings.HasSuffix(base, ".yml"), strings.HasSuffix(base, ".json"), strings.HasSuffix(base, ".template"):
		return "template?"
	}
	return ""
}

// readFile reads and parses one file by its kind; a file that cannot be read or parsed is a warning.
func (sc *scan) readFile(p string) {
	kind := fileKind(p)
	if kind == "" || sc.read[p] {
		return
	}
	sc.read[p] = true
	src, err := fs.ReadFile(sc.fsys, p)
	if err != nil {
		sc.warn(p, 0, "cannot read: %v", err)
		return
	}
	count := func() {
		sc.files++
		sc.lines += bytes.Count(src, []byte{'\n'})
		if len(src) > 0 && src[len(src)-1] != '\n' {
			sc.lines++
		}
	}
	switch kind {
	case "tf":
		count()
		body, ok := sc.parseHCL(p, src)
		if ok {
			sc.module(path.Dir(p)).addHCL(sc, p, body)
		}
	case "tf.json":
		count()
		if n, ok := sc.parseYAML(p, src); ok {
			sc.module(path.Dir(p)).addJSON(sc, p, n)
		}
	case "tfvars":
		count()
		if body, ok := sc.parseHCL(p, src); ok {
			f := &tfvarsFile{file: p, values: map[string]expr{}}
			for name, a := range body.Attributes {
				f.values[name] = expr{h: a.Expr, file: p}
			}
			sc.tfvars[path.Dir(p)] = append(sc.tfvars[path.Dir(p)], f)
		}
	case "tfvars.json":
		count()
		if n, ok := sc.parseYAML(p, src); ok {
			f := &tfvarsFile{file: p, values: map[string]expr{}}
			eachPair(n, func(k string, _ *yaml.Node, v *yaml.Node) { f.values[k] = expr{j: v, file: p} })
			sc.tfvars[path.Dir(p)] = append(sc.tfvars[path.Dir(p)], f)
		}
	case "terragrunt":
		count()
		if body, ok := sc.parseHCL(p, src); ok {
			sc.terragrunt = append(sc.terragrunt, newTerragrunt(p, body))
		}
	case "cdk.context":
		count()
		if n, ok := sc.parseYAML(p, src); ok {
			sc.contexts = append(sc.contexts, &cdkContext{file: p, root: n})
		}
	case "template?":
		// Any YAML or JSON file may be a template: it is one when it has a Resources section of typed
		// resources. Anything else (a manifest, a package.json) is not counted.
		var n yaml.Node
		if err := yaml.Unmarshal(src, &n); err != nil {
			if looksLikeTemplate(src) {
				count()
				sc.warn(p, yamlErrorLine(err), "cannot parse: %v", err)
			}
			return
		}
		root := docRoot(&n)
		if !isTemplate(root) {
			return
		}
		count()
		sc.addTemplate(p, root)
	}
}

// parseHCL parses HCL native syntax; a file with errors is a warning and is left out.
func (sc *scan) parseHCL(p string, src []byte) (*hclsyntax.Body, bool) {
	f, diags := hclsyntax.ParseConfig(src, p, hcl.Pos{Line: 1, Column: 1})
	if diags.HasErrors() {
		for _, d := range diags {
			if d.Severity != hcl.DiagError {
				continue
			}
			line := 0
			if d.Subject != nil {
				line = d.Subject.Start.Line
			}
			sc.warn(p, line, "cannot parse: %s: %s (the file is left out)", d.Summary, d.Detail)
			break
		}
		return nil, false
	}
	body, ok := f.Body.(*hclsyntax.Body)
	return body, ok
}

// parseYAML parses YAML or JSON with line numbers; a file with errors is a warning and is left out.
func (sc *scan) parseYAML(p string, src []byte) (*yaml.Node, bool) {
	var n yaml.Node
	if err := yaml.Unmarshal(src, &n); err != nil {
		sc.warn(p, yamlErrorLine(err), "cannot parse: %v (the file is left out)", err)
		return nil, false
	}
	root := docRoot(&n)
	if root == nil || root.Kind != yaml.MappingNode {
		sc.warn(p, 0, "cannot parse: not an object (the file is left out)")
		return nil, false
	}
	return root, true
}

// yamlErrorLine finds the line in a YAML parser's error ("yaml: line 12: ..."), 0 when it names none.
func yamlErrorLine(err error) int {
	var line int
	msg := err.Error()
	if i := strings.Index(msg, "line "); i >= 0 {
		fmt.Sscanf(msg[i+len("line "):], "%d", &line)
	}
	return line
}

// looksLikeTemplate tells a template the parser refused from any other YAML or JSON file.
func looksLikeTemplate(src []byte) bool {
	return bytes.Contains(src, []byte("AWSTemplateFormatVersion")) || bytes.Contains(src, []byte("AWS::"))
}

func docRoot(n *yaml.Node) *yaml.Node {
	for n != nil && (n.Kind == yaml.DocumentNode || n.Kind == yaml.AliasNode) {
		if n.Kind == yaml.AliasNode {
			n = n.Alias
			continue
		}
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	return n
}

// eachPair calls fn for every key and value of a mapping node, in order.
func eachPair(n *yaml.Node, fn func(key string, k, v *yaml.Node)) {
	n = docRoot(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		fn(n.Content[i].Value, n.Content[i], n.Content[i+1])
	}
}

// get returns the value of key in a mapping node, nil when absent.
func get(n *yaml.Node, key string) *yaml.Node {
	n = docRoot(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return docRoot(n.Content[i+1])
		}
	}
	return nil
}

// loadDir reads the Terraform files of a directory that a module call or terragrunt source names and that
// the walk did not read; it returns the module, nil when the directory has none.
func (sc *scan) loadDir(dir string) *tfModule {
	if m, ok := sc.modules[dir]; ok {
		return m
	}
	entries, err := fs.ReadDir(sc.fsys, dir)
	if err != nil {
		return nil
	}
	for _, e := range entries {
		if !e.IsDir() {
			if k := fileKind(e.Name()); k == "tf" || k == "tf.json" {
				sc.readFile(path.Join(dir, e.Name()))
			}
		}
	}
	return sc.modules[dir]
}

// analyse follows every root module, terragrunt file, root template and CDK context to the rows.
func (sc *scan) analyse() {
	sc.analyseTerraform()
	sc.analyseCloudFormation()
	for _, c := range sc.contexts {
		sc.analyseContext(c)
	}
}

func (sc *scan) addFinding(f Finding) {
	k := fmt.Sprintf("%s:%d %s %s %s", f.File, f.Line, f.Resource, f.Attribute, f.ImageID)
	if sc.seenFinding[k] {
		return
	}
	sc.seenFinding[k] = true
	sc.findings = append(sc.findings, f)
}

func (sc *scan) addPractice(p Practice) {
	k := fmt.Sprintf("%s:%d %s %s %s", p.File, p.Line, p.Resource, p.Attribute, p.Detail)
	if sc.seenPract[k] {
		return
	}
	sc.seenPract[k] = true
	sc.practices = append(sc.practices, p)
}
