package iac

import (
	"path"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// tgFile is a terragrunt.hcl: the module it deploys (terraform { source }) and the inputs it sets, which may
// refer to its locals.
type tgFile struct {
	file, dir  string
	source     string
	sourceLine int
	inputs     map[string]expr
	inputsLine int
	locals     map[string]expr
}

func newTerragrunt(file string, body *hclsyntax.Body) *tgFile {
	tg := &tgFile{file: file, dir: path.Dir(file), inputs: map[string]expr{}, locals: map[string]expr{}}
	for _, b := range body.Blocks {
		switch b.Type {
		case "terraform":
			if a, ok := b.Body.Attributes["source"]; ok {
				tg.source, tg.sourceLine = stringValue(a.Expr), a.SrcRange.Start.Line
				if tg.source == "" {
					tg.source = "?" // not a literal: an expression of terragrunt functions
				}
			}
		case "locals":
			for _, a := range sortedAttrs(b.Body) {
				tg.locals[a.Name] = expr{h: a.Expr, file: file}
			}
		}
	}
	if a, ok := body.Attributes["inputs"]; ok {
		tg.inputsLine = a.SrcRange.Start.Line
		if obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr); ok {
			for _, it := range obj.Items {
				if k := exprKey(it.KeyExpr); k != anyKey {
					tg.inputs[k] = expr{h: it.ValueExpr, file: file}
				}
			}
		}
	}
	return tg
}

// isLocalTerragruntSource tells a terragrunt source on the local file system: a path, with no go-getter
// scheme ("git::", "s3::", "https://", "tfr://") or host.
func isLocalTerragruntSource(src string) bool {
	if src == "" || src == "?" || strings.Contains(src, "::") || strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
		return false
	}
	first, _, _ := strings.Cut(src, "/")
	return !strings.Contains(first, ".") || first == "." || first == ".."
}

// moduleDir is the directory of the module the file deploys: its local source ("//" marks the module's
// directory inside the source and is dropped), or its own directory when it names no source.
func (tg *tgFile) moduleDir() (string, bool) {
	if tg.source == "" {
		return tg.dir, true
	}
	if !isLocalTerragruntSource(tg.source) {
		return "", false
	}
	src, _, _ := strings.Cut(tg.source, "?")
	if path.IsAbs(src) {
		return path.Clean(src), true
	}
	return path.Join(tg.dir, src), true
}

// report follows the inputs into the module (or, for a remote source, reports the AMI ids passed to it).
func (tg *tgFile) report(sc *scan) {
	own := sc.newScope(&tfModule{dir: tg.dir, locals: tg.locals, vars: map[string]expr{}, outputs: map[string]expr{}}, KindTerragrunt)
	addr := "terragrunt:" + tg.dir
	if dir, ok := tg.moduleDir(); ok {
		m := sc.loadDir(dir)
		if m == nil {
			sc.warn(tg.file, tg.sourceLine, "source %s has no Terraform files to read: not followed", tg.source)
			return
		}
		s := sc.newScope(m, KindTerragrunt)
		s.addr = addr + " "
		s.inputs, s.caller, s.callLabel = tg.inputs, own, addr+" inputs"
		s.report(0)
		return
	}
	what := "source " + tg.source
	if tg.source == "?" {
		what = "a source that is not a literal"
	}
	sc.warn(tg.file, tg.sourceLine, "%s not followed (a remote source)", what)
	names := make([]string, 0, len(tg.inputs))
	for n := range tg.inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		in := tg.inputs[n]
		sc.rows(own.eval(in, 0), target{addr: addr, typ: "terragrunt", attr: "inputs." + n, file: in.file, line: in.line(),
			kind: KindTerragrunt, note: what + " not followed: the AMI is passed to it"})
	}
}
