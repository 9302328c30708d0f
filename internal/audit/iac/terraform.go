package iac

import (
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	yaml "go.yaml.in/yaml/v3"
)

// tfTargets are the Terraform resource types that launch instances from an AMI (or name one for the instances
// others launch), and tfImageAttrs the attributes, at any depth of their body, that name the AMI.
var (
	tfTargets = map[string]bool{"aws_launch_template": true, "aws_launch_configuration": true, "aws_instance": true,
		"aws_spot_instance_request": true, "aws_spot_fleet_request": true, "aws_autoscaling_group": true, "aws_eks_node_group": true}
	tfImageAttrs = map[string]bool{"image_id": true, "ami": true, "ami_id": true}
	// tfParameterData are the data sources that make the code follow a parameter or a search, not an id.
	tfParameterData = map[string]bool{"aws_ssm_parameter": true, "aws_ami": true, "aws_ami_ids": true}
	// tfMetaArgs are the arguments of a module block that are no input.
	tfMetaArgs = map[string]bool{"source": true, "version": true, "count": true, "for_each": true, "providers": true, "depends_on": true}
)

// expr is an expression of HCL native syntax, or a JSON value (of .tf.json, .tfvars.json), in file.
type expr struct {
	h    hclsyntax.Expression
	j    *yaml.Node
	file string
}

func (e expr) line() int {
	if e.h != nil {
		return e.h.Range().Start.Line
	}
	if e.j != nil {
		return e.j.Line
	}
	return 0
}

type tfAttr struct {
	name string
	e    expr
}

type tfResource struct {
	typ, name string
	attrs     []tfAttr // the AMI attributes
}

type tfCall struct {
	name, source string
	file         string
	line         int
	inputs       map[string]expr
}

// tfModule is what the files of one directory declare.
type tfModule struct {
	dir       string
	vars      map[string]expr // the variables' defaults (a variable without one is absent)
	declared  map[string]bool
	locals    map[string]expr
	outputs   map[string]expr
	resources []*tfResource
	calls     []*tfCall
}

type tfvarsFile struct {
	file   string
	values map[string]expr
}

func (sc *scan) module(dir string) *tfModule {
	m, ok := sc.modules[dir]
	if !ok {
		m = &tfModule{dir: dir, vars: map[string]expr{}, declared: map[string]bool{}, locals: map[string]expr{}, outputs: map[string]expr{}}
		sc.modules[dir] = m
		sc.modOrder = append(sc.modOrder, dir)
	}
	return m
}

func sortedAttrs(b *hclsyntax.Body) []*hclsyntax.Attribute {
	out := make([]*hclsyntax.Attribute, 0, len(b.Attributes))
	for _, a := range b.Attributes {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SrcRange.Start.Byte < out[j].SrcRange.Start.Byte })
	return out
}

// addHCL adds what one .tf file declares.
func (m *tfModule) addHCL(sc *scan, file string, body *hclsyntax.Body) {
	for _, b := range body.Blocks {
		switch {
		case b.Type == "variable" && len(b.Labels) == 1:
			m.declared[b.Labels[0]] = true
			if a, ok := b.Body.Attributes["default"]; ok {
				m.vars[b.Labels[0]] = expr{h: a.Expr, file: file}
			}
		case b.Type == "locals":
			for _, a := range sortedAttrs(b.Body) {
				m.locals[a.Name] = expr{h: a.Expr, file: file}
			}
		case b.Type == "output" && len(b.Labels) == 1:
			if a, ok := b.Body.Attributes["value"]; ok {
				m.outputs[b.Labels[0]] = expr{h: a.Expr, file: file}
			}
		case b.Type == "resource" && len(b.Labels) == 2:
			if !tfTargets[b.Labels[0]] {
				continue
			}
			r := &tfResource{typ: b.Labels[0], name: b.Labels[1]}
			collectHCL(b.Body, file, &r.attrs)
			m.resources = append(m.resources, r)
		case b.Type == "module" && len(b.Labels) == 1:
			c := &tfCall{name: b.Labels[0], file: file, line: b.TypeRange.Start.Line, inputs: map[string]expr{}}
			for _, a := range sortedAttrs(b.Body) {
				if a.Name == "source" {
					c.source = stringValue(a.Expr)
					continue
				}
				if !tfMetaArgs[a.Name] {
					c.inputs[a.Name] = expr{h: a.Expr, file: file}
				}
			}
			m.calls = append(m.calls, c)
		}
	}
}

// collectHCL finds the AMI attributes of a resource body and its nested blocks.
func collectHCL(b *hclsyntax.Body, file string, out *[]tfAttr) {
	for _, a := range sortedAttrs(b) {
		if tfImageAttrs[a.Name] {
			*out = append(*out, tfAttr{name: a.Name, e: expr{h: a.Expr, file: file}})
		}
	}
	for _, nb := range b.Blocks {
		collectHCL(nb.Body, file, out)
	}
}

// stringValue is the value of a literal string expression, "" for anything else.
func stringValue(e hclsyntax.Expression) string {
	v, diags := e.Value(nil)
	if diags.HasErrors() || !v.IsKnown() || v.IsNull() || v.Type() != cty.String {
		return ""
	}
	return v.AsString()
}

// addJSON adds what one .tf.json file declares (Terraform's JSON configuration syntax).
func (m *tfModule) addJSON(sc *scan, file string, root *yaml.Node) {
	eachBody := func(n *yaml.Node, fn func(*yaml.Node)) { // a body is an object, or an array of objects
		n = docRoot(n)
		if n != nil && n.Kind == yaml.SequenceNode {
			for _, c := range n.Content {
				fn(docRoot(c))
			}
			return
		}
		fn(n)
	}
	eachPair(root, func(section string, _ *yaml.Node, v *yaml.Node) {
		switch section {
		case "variable":
			eachPair(v, func(name string, _, body *yaml.Node) {
				m.declared[name] = true
				eachBody(body, func(b *yaml.Node) {
					if d := get(b, "default"); d != nil {
						m.vars[name] = expr{j: d, file: file}
					}
				})
			})
		case "locals":
			eachBody(v, func(b *yaml.Node) {
				eachPair(b, func(name string, _, val *yaml.Node) { m.locals[name] = expr{j: val, file: file} })
			})
		case "output":
			eachPair(v, func(name string, _, body *yaml.Node) {
				eachBody(body, func(b *yaml.Node) {
					if val := get(b, "value"); val != nil {
						m.outputs[name] = expr{j: val, file: file}
					}
				})
			})
		case "resource":
			eachPair(v, func(typ string, _, byName *yaml.Node) {
				if !tfTargets[typ] {
					return
				}
				eachPair(byName, func(name string, _, body *yaml.Node) {
					r := &tfResource{typ: typ, name: name}
					collectJSON(body, file, tfImageAttrs, &r.attrs)
					m.resources = append(m.resources, r)
				})
			})
		case "module":
			eachPair(v, func(name string, k, body *yaml.Node) {
				c := &tfCall{name: name, file: file, line: k.Line, inputs: map[string]expr{}}
				eachBody(body, func(b *yaml.Node) {
					eachPair(b, func(in string, _, val *yaml.Node) {
						if in == "source" {
							c.source = val.Value
						} else if !tfMetaArgs[in] {
							c.inputs[in] = expr{j: val, file: file}
						}
					})
				})
				m.calls = append(m.calls, c)
			})
		}
	})
}

// collectJSON finds the attributes named in names at any depth of a JSON body.
func collectJSON(n *yaml.Node, file string, names map[string]bool, out *[]tfAttr) {
	n = docRoot(n)
	if n == nil {
		return
	}
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			if names[n.Content[i].Value] {
				*out = append(*out, tfAttr{name: n.Content[i].Value, e: expr{j: n.Content[i+1], file: file}})
				continue
			}
			collectJSON(n.Content[i+1], file, names, out)
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			collectJSON(c, file, names, out)
		}
	}
}

// tfScope is one instance of a module: the root, a module called with its inputs, or the module a terragrunt
// file sets inputs of.
type tfScope struct {
	sc   *scan
	mod  *tfModule
	addr string // "" for a root; "module.workers." for a module it calls
	kind string
	// inputs are the values the caller sets, evaluated in caller; nil for a root.
	inputs    map[string]expr
	caller    *tfScope
	callLabel string
	// tfvars are the variable files of a root module.
	tfvars   []*tfvarsFile
	dirs     []string // the modules' directories from the root (a module calling itself ends there)
	memo     map[string][]leaf
	visiting map[string]bool
	children map[string]*tfScope
}

func (sc *scan) newScope(m *tfModule, kind string) *tfScope {
	return &tfScope{sc: sc, mod: m, kind: kind, dirs: []string{m.dir}, memo: map[string][]leaf{}, visiting: map[string]bool{},
		children: map[string]*tfScope{}}
}

func (s *tfScope) eval(e expr, depth int) []leaf {
	if depth > maxDepth {
		return nil
	}
	if e.h != nil {
		return s.evalHCL(e.h, e.file, depth+1)
	}
	if e.j != nil {
		return s.evalJSON(e.j, e.file, depth+1)
	}
	return nil
}

// evalJSON evaluates a value of Terraform's JSON syntax: strings holding "${...}" are templates.
func (s *tfScope) evalJSON(n *yaml.Node, file string, depth int) []leaf {
	n = docRoot(n)
	if n == nil || depth > maxDepth {
		return nil
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if strings.Contains(n.Value, "${") {
			t, diags := hclsyntax.ParseTemplate([]byte(n.Value), file, hcl.Pos{Line: n.Line, Column: n.Column + 1})
			if diags.HasErrors() {
				s.sc.warn(file, n.Line, "cannot parse the template %q: %s", n.Value, diags[0].Summary)
				return nil
			}
			return s.evalHCL(t, file, depth+1)
		}
		return literal(n.Value, file, n.Line)
	case yaml.MappingNode:
		var out []leaf
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, prefixed(s.evalJSON(n.Content[i+1], file, depth+1), n.Content[i].Value)...)
		}
		return out
	case yaml.SequenceNode:
		var out []leaf
		for i, c := range n.Content {
			out = append(out, prefixed(s.evalJSON(c, file, depth+1), strconv.Itoa(i))...)
		}
		return out
	}
	return nil
}

// keyOf is the key an index expression or traversal step names, anyKey when it is not a literal.
func keyOf(v cty.Value) string {
	if !v.IsKnown() || v.IsNull() {
		return anyKey
	}
	switch v.Type() {
	case cty.String:
		return v.AsString()
	case cty.Number:
		return v.AsBigFloat().Text('f', -1)
	}
	return anyKey
}

func exprKey(e hclsyntax.Expression) string {
	v, diags := e.Value(nil)
	if diags.HasErrors() {
		return anyKey
	}
	return keyOf(v)
}

// evalHCL evaluates an expression of HCL native syntax to the leaves it may take.
func (s *tfScope) evalHCL(e hclsyntax.Expression, file string, depth int) []leaf {
	if depth > maxDepth {
		return nil
	}
	switch x := e.(type) {
	case *hclsyntax.LiteralValueExpr:
		if x.Val.IsKnown() && !x.Val.IsNull() && x.Val.Type() == cty.String {
			return literal(x.Val.AsString(), file, x.SrcRange.Start.Line)
		}
		return nil
	case *hclsyntax.TemplateExpr:
		var out []leaf
		for _, p := range x.Parts {
			out = append(out, s.evalHCL(p, file, depth+1)...)
		}
		return out
	case *hclsyntax.TemplateWrapExpr:
		return s.evalHCL(x.Wrapped, file, depth+1)
	case *hclsyntax.ParenthesesExpr:
		return s.evalHCL(x.Expression, file, depth+1)
	case *hclsyntax.ScopeTraversalExpr:
		return s.traversal(x.Traversal, file, depth+1)
	case *hclsyntax.RelativeTraversalExpr:
		return steps(s.evalHCL(x.Source, file, depth+1), x.Traversal)
	case *hclsyntax.IndexExpr:
		return under(s.evalHCL(x.Collection, file, depth+1), exprKey(x.Key))
	case *hclsyntax.SplatExpr:
		return under(s.evalHCL(x.Source, file, depth+1), anyKey)
	case *hclsyntax.ConditionalExpr:
		return append(s.evalHCL(x.TrueResult, file, depth+1), s.evalHCL(x.FalseResult, file, depth+1)...)
	case *hclsyntax.ObjectConsExpr:
		var out []leaf
		for _, it := range x.Items {
			out = append(out, prefixed(s.evalHCL(it.ValueExpr, file, depth+1), exprKey(it.KeyExpr))...)
		}
		return out
	case *hclsyntax.TupleConsExpr:
		var out []leaf
		for i, el := range x.Exprs {
			out = append(out, prefixed(s.evalHCL(el, file, depth+1), strconv.Itoa(i))...)
		}
		return out
	case *hclsyntax.ForExpr:
		return s.evalHCL(x.CollExpr, file, depth+1)
	case *hclsyntax.FunctionCallExpr:
		switch x.Name {
		case "lookup": // lookup(map, key[, default])
			if len(x.Args) >= 2 {
				out := under(s.evalHCL(x.Args[0], file, depth+1), exprKey(x.Args[1]))
				if len(x.Args) == 3 {
					out = append(out, s.evalHCL(x.Args[2], file, depth+1)...)
				}
				return out
			}
		case "element", "one", "values", "flatten", "concat", "tolist", "toset":
			var out []leaf
			for _, a := range x.Args {
				out = append(out, under(s.evalHCL(a, file, depth+1), anyKey)...)
			}
			return out
		}
		// Any other function may return one of its arguments (try, coalesce, merge, tostring ...).
		var out []leaf
		for _, a := range x.Args {
			out = append(out, s.evalHCL(a, file, depth+1)...)
		}
		return out
	}
	// Anything else (operators, template joins): the values of what it references.
	var out []leaf
	for _, t := range e.Variables() {
		out = append(out, s.traversal(t, file, depth+1)...)
	}
	return out
}

// steps applies the attribute and index steps of a traversal to leaves.
func steps(in []leaf, tr hcl.Traversal) []leaf {
	for _, st := range tr {
		switch t := st.(type) {
		case hcl.TraverseAttr:
			in = under(in, t.Name)
		case hcl.TraverseIndex:
			in = under(in, keyOf(t.Key))
		case hcl.TraverseSplat:
			in = under(in, anyKey)
		}
	}
	return in
}

func attrName(st hcl.Traverser) string {
	if a, ok := st.(hcl.TraverseAttr); ok {
		return a.Name
	}
	return ""
}

// traversal evaluates a reference: var.*, local.*, module.*.*, data.* (a parameter data source is practice);
// anything else (a resource's attribute, each, count, path) takes no value known here.
func (s *tfScope) traversal(tr hcl.Traversal, file string, depth int) []leaf {
	if len(tr) < 2 {
		return nil
	}
	name := attrName(tr[1])
	switch tr.RootName() {
	case "var":
		return steps(s.variable(name, depth), tr[2:])
	case "local":
		return steps(s.local(name, depth), tr[2:])
	case "data":
		if len(tr) >= 3 && tfParameterData[name] {
			ref := "data." + name + "." + attrName(tr[2])
			return []leaf{{value: ref, practice: ref, file: file, line: tr.SourceRange().Start.Line}}
		}
	case "module":
		if len(tr) >= 3 {
			return steps(s.moduleOutput(name, attrName(tr[2]), depth), tr[3:])
		}
	}
	return nil
}

// remember evaluates a named value once per scope; a reference back to itself takes no value.
func (s *tfScope) remember(key string, fn func() []leaf) []leaf {
	if l, ok := s.memo[key]; ok {
		return l
	}
	if s.visiting[key] {
		return nil
	}
	s.visiting[key] = true
	l := fn()
	delete(s.visiting, key)
	s.memo[key] = l
	return l
}

// variable is what var.name may be: the caller's input (else the default) for a called module; for a root,
// every variable file's value and the default.
func (s *tfScope) variable(name string, depth int) []leaf {
	return s.remember("var."+name, func() []leaf {
		if in, ok := s.inputs[name]; ok && s.caller != nil {
			return through(s.caller.eval(in, depth+1), "var."+name+" from "+s.callLabel)
		}
		var out []leaf
		for _, f := range s.tfvars {
			if v, ok := f.values[name]; ok {
				out = append(out, through(s.eval(v, depth+1), "var."+name+" in "+path.Base(f.file))...)
			}
		}
		if d, ok := s.mod.vars[name]; ok {
			out = append(out, through(s.eval(d, depth+1), "var."+name+" default")...)
		}
		return out
	})
}

func (s *tfScope) local(name string, depth int) []leaf {
	return s.remember("local."+name, func() []leaf {
		if e, ok := s.mod.locals[name]; ok {
			return through(s.eval(e, depth+1), "local."+name)
		}
		return nil
	})
}

func (s *tfScope) moduleOutput(call, output string, depth int) []leaf {
	return s.remember("module."+call+"."+output, func() []leaf {
		for _, c := range s.mod.calls {
			if c.name != call {
				continue
			}
			child := s.child(c)
			if child == nil {
				return nil
			}
			if e, ok := child.mod.outputs[output]; ok {
				return through(child.eval(e, depth+1), "module."+call+"."+output)
			}
		}
		return nil
	})
}

// isLocalSource tells a module source Terraform reads from the local file system ("./", "../").
func isLocalSource(src string) bool {
	return strings.HasPrefix(src, "./") || strings.HasPrefix(src, "../") || strings.HasPrefix(src, "/")
}

// child is the scope of a module call with a local source, nil when the source is remote, has no
// Terraform files, or calls a module already on the chain.
func (s *tfScope) child(c *tfCall) *tfScope {
	if ch, ok := s.children[c.name]; ok {
		return ch
	}
	s.children[c.name] = nil
	if !isLocalSource(c.source) {
		return nil
	}
	dir := path.Join(s.mod.dir, c.source)
	for _, d := range s.dirs {
		if d == dir {
			s.sc.warn(c.file, c.line, "module %s calls %s, already on the chain of calls: not followed again", c.name, c.source)
			return nil
		}
	}
	m := s.sc.loadDir(dir)
	if m == nil {
		s.sc.warn(c.file, c.line, "module %s: source %s has no Terraform files to read: not followed", c.name, c.source)
		return nil
	}
	ch := s.sc.newScope(m, s.kind)
	ch.addr = s.addr + "module." + c.name + "."
	ch.inputs, ch.caller, ch.callLabel = c.inputs, s, s.addr+"module."+c.name
	ch.dirs = append(append([]string(nil), s.dirs...), dir)
	s.children[c.name] = ch
	return ch
}

// report adds the findings and practices of a scope and of the modules it calls.
func (s *tfScope) report(depth int) {
	if depth > maxDepth {
		return
	}
	for _, r := range s.mod.resources {
		for _, a := range r.attrs {
			s.sc.rows(s.eval(a.e, 0), target{addr: s.addr + r.typ + "." + r.name, typ: r.typ, attr: a.name, file: a.e.file,
				line: a.e.line(), kind: s.kind})
		}
	}
	for _, c := range s.mod.calls {
		if ch := s.child(c); ch != nil {
			ch.report(depth + 1)
			continue
		}
		if isLocalSource(c.source) {
			continue // warned by child
		}
		what := "source " + c.source
		if c.source == "" {
			what = "no literal source"
		}
		s.sc.warn(c.file, c.line, "%s: %s not followed (a remote source)", s.addr+"module."+c.name, what)
		names := make([]string, 0, len(c.inputs))
		for n := range c.inputs {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			in := c.inputs[n]
			s.sc.rows(s.eval(in, 0), target{addr: s.addr + "module." + c.name, typ: "module", attr: n, file: in.file, line: in.line(),
				kind: s.kind, note: "module " + what + " not followed: the AMI is passed to it"})
		}
	}
}

// target is the attribute that leaves reach.
type target struct {
	addr, typ, attr, file string
	line                  int
	kind, note            string
}

// rows turns the leaves reaching a target into findings (AMI ids) and practices (parameter references).
func (sc *scan) rows(leaves []leaf, t target) {
	for _, l := range leaves {
		if l.practice != "" {
			sc.addPractice(Practice{File: t.file, Line: t.line, Resource: t.addr, ResourceType: t.typ, Attribute: t.attr,
				Source: l.practice, Detail: l.value, Kind: t.kind})
			continue
		}
		sc.addFinding(Finding{File: l.file, Line: l.line, Resource: t.addr, ResourceType: t.typ, ResourceFile: t.file,
			ResourceLine: t.line, Attribute: t.attr, ImageID: l.value, Via: viaText(l), Kind: t.kind, Note: t.note})
	}
}

// analyseTerraform reports every root module (a directory no module call or terragrunt file of the scan
// names), with the variable files of its directory and of directories below it that hold no module, and
// every terragrunt file.
func (sc *scan) analyseTerraform() {
	called := map[string]bool{}
	for _, dir := range sc.modOrder {
		for _, c := range sc.modules[dir].calls {
			if isLocalSource(c.source) {
				called[path.Join(dir, c.source)] = true
			}
		}
	}
	for _, tg := range sc.terragrunt {
		if dir, ok := tg.moduleDir(); ok {
			called[dir] = true
		}
	}
	roots := map[string]*tfScope{}
	var order []string
	for _, dir := range append([]string(nil), sc.modOrder...) {
		if !called[dir] {
			roots[dir] = sc.newScope(sc.modules[dir], KindTerraform)
			order = append(order, dir)
		}
	}
	tfvarDirs := make([]string, 0, len(sc.tfvars))
	for d := range sc.tfvars {
		tfvarDirs = append(tfvarDirs, d)
	}
	sort.Strings(tfvarDirs)
	for _, d := range tfvarDirs {
		for a := d; ; a = path.Dir(a) {
			if r, ok := roots[a]; ok {
				r.tfvars = append(r.tfvars, sc.tfvars[d]...)
				break
			}
			if _, isModule := sc.modules[a]; isModule || a == "." || a == "/" || path.Dir(a) == a {
				break // variable files beside a called module, or of no module
			}
		}
	}
	for _, dir := range order {
		roots[dir].report(0)
	}
	for _, tg := range sc.terragrunt {
		tg.report(sc)
	}
}
