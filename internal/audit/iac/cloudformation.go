package iac

import (
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// cfnTargets are the CloudFormation resource types that launch instances from an AMI; the AMI is any
// ImageId at any depth of their Properties.
var cfnTargets = map[string]bool{"AWS::EC2::LaunchTemplate": true, "AWS::AutoScaling::LaunchConfiguration": true,
	"AWS::EC2::Instance": true, "AWS::EC2::SpotFleet": true, "AWS::EC2::EC2Fleet": true, "AWS::AutoScaling::AutoScalingGroup": true,
	"AWS::EKS::Nodegroup": true}

const (
	cfnStack           = "AWS::CloudFormation::Stack"
	cfnSSMParameterAMI = "AWS::SSM::Parameter::Value<"
)

// cfnTemplate is a CloudFormation template (CDK output included).
type cfnTemplate struct {
	file      string
	params    map[string]*yaml.Node
	mappings  *yaml.Node
	resources []cfnResource
}

type cfnResource struct {
	id, typ, cdkPath string
	line             int
	props            *yaml.Node
}

// isTemplate tells a CloudFormation template: a Resources object whose entries have a Type.
func isTemplate(root *yaml.Node) bool {
	res := get(root, "Resources")
	if res == nil || res.Kind != yaml.MappingNode || len(res.Content) == 0 {
		return false
	}
	return get(res.Content[1], "Type") != nil
}

func (sc *scan) addTemplate(file string, root *yaml.Node) *cfnTemplate {
	t := &cfnTemplate{file: file, params: map[string]*yaml.Node{}, mappings: get(root, "Mappings")}
	eachPair(get(root, "Parameters"), func(name string, _, v *yaml.Node) { t.params[name] = docRoot(v) })
	eachPair(get(root, "Resources"), func(id string, k, v *yaml.Node) {
		r := cfnResource{id: id, line: k.Line, props: get(v, "Properties")}
		if ty := get(v, "Type"); ty != nil {
			r.typ = ty.Value
		}
		if p := get(get(v, "Metadata"), "aws:cdk:path"); p != nil {
			r.cdkPath = p.Value
		}
		t.resources = append(t.resources, r)
	})
	sc.templates[file] = t
	sc.tplOrder = append(sc.tplOrder, file)
	return t
}

// loadTemplate reads a nested stack's template that the walk did not read; nil when it cannot.
func (sc *scan) loadTemplate(file string, from string, line int) *cfnTemplate {
	if t, ok := sc.templates[file]; ok {
		return t
	}
	if sc.read[file] {
		return nil // read, and not a template (warned)
	}
	sc.read[file] = true
	src, err := fs.ReadFile(sc.fsys, file)
	if err != nil {
		sc.warn(from, line, "nested stack template %s cannot be read: %v", file, err)
		return nil
	}
	sc.files++
	sc.lines += strings.Count(string(src), "\n")
	root, ok := sc.parseYAML(file, src)
	if !ok {
		return nil
	}
	if !isTemplate(root) {
		sc.warn(from, line, "nested stack template %s has no Resources: not followed", file)
		return nil
	}
	return sc.addTemplate(file, root)
}

// localTemplateURL is the file a nested stack's TemplateURL names when it is a local path (as `aws
// cloudformation package` and `sam` read it); ok is false for a URL.
func localTemplateURL(n *yaml.Node) (string, bool) {
	n = docRoot(n)
	if n == nil || n.Kind != yaml.ScalarNode || (strings.HasPrefix(n.Tag, "!") && !strings.HasPrefix(n.Tag, "!!")) {
		return "", false
	}
	u := n.Value
	if u == "" || strings.Contains(u, "://") || strings.HasPrefix(u, "s3:") {
		return "", false
	}
	return u, true
}

// cfnScope is one instance of a template: a root stack, or a nested stack with the parameters its parent
// passes.
type cfnScope struct {
	sc       *scan
	t        *cfnTemplate
	addr     string // "" or the nested stacks' path ("Workers/")
	inputs   *yaml.Node
	parent   *cfnScope
	label    string
	files    []string // the templates from the root (a template nesting itself ends there)
	memo     map[string][]leaf
	visiting map[string]bool
}

func (sc *scan) newCFNScope(t *cfnTemplate) *cfnScope {
	return &cfnScope{sc: sc, t: t, files: []string{t.file}, memo: map[string][]leaf{}, visiting: map[string]bool{}}
}

func isIntrinsicTag(tag string) bool {
	return strings.HasPrefix(tag, "!") && !strings.HasPrefix(tag, "!!")
}

// eval evaluates a template value: literals, Ref, Fn::FindInMap, Fn::Sub, Fn::If and the other intrinsic
// functions, in the short (!Ref) or the long ({"Ref": ...}) form.
func (s *cfnScope) eval(n *yaml.Node, depth int) []leaf {
	n = docRoot(n)
	if n == nil || depth > maxDepth {
		return nil
	}
	if isIntrinsicTag(n.Tag) {
		arg := *n
		arg.Tag = ""
		return s.intrinsic(n.Tag[1:], &arg, depth+1)
	}
	switch n.Kind {
	case yaml.ScalarNode:
		return literal(n.Value, s.t.file, n.Line)
	case yaml.MappingNode:
		if len(n.Content) == 2 {
			k := n.Content[0].Value
			if k == "Ref" || strings.HasPrefix(k, "Fn::") {
				return s.intrinsic(strings.TrimPrefix(k, "Fn::"), docRoot(n.Content[1]), depth+1)
			}
		}
		var out []leaf
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = append(out, prefixed(s.eval(n.Content[i+1], depth+1), n.Content[i].Value)...)
		}
		return out
	case yaml.SequenceNode:
		var out []leaf
		for i, c := range n.Content {
			out = append(out, prefixed(s.eval(c, depth+1), strconv.Itoa(i))...)
		}
		return out
	}
	return nil
}

// subVar matches a ${Name} of Fn::Sub (not ${!Literal}, not ${Resource.Attribute}).
var subVar = regexp.MustCompile(`\$\{([A-Za-z0-9:_]+)\}`)

func (s *cfnScope) intrinsic(fn string, arg *yaml.Node, depth int) []leaf {
	if arg == nil {
		return nil
	}
	items := func() []*yaml.Node {
		if arg.Kind == yaml.SequenceNode {
			return arg.Content
		}
		return nil
	}
	switch fn {
	case "Ref":
		return s.ref(arg.Value, depth+1)
	case "FindInMap":
		it := items()
		if len(it) < 3 {
			return nil
		}
		name := scalarKey(it[0])
		m := get(s.t.mappings, name)
		if m == nil {
			return nil
		}
		return through(under(under(s.eval(m, depth+1), scalarKey(it[1])), scalarKey(it[2])), "!FindInMap "+name)
	case "Sub":
		text, vars := arg, (*yaml.Node)(nil)
		if it := items(); len(it) >= 1 {
			text = docRoot(it[0])
			if len(it) == 2 {
				vars = docRoot(it[1])
			}
		}
		if text == nil || text.Kind != yaml.ScalarNode {
			return nil
		}
		out := literal(text.Value, s.t.file, text.Line)
		for _, m := range subVar.FindAllStringSubmatch(text.Value, -1) {
			if v := get(vars, m[1]); v != nil {
				out = append(out, s.eval(v, depth+1)...)
				continue
			}
			out = append(out, s.ref(m[1], depth+1)...)
		}
		return out
	case "GetAtt", "ImportValue", "GetAZs", "Cidr", "Condition":
		return nil // no value known from the template
	case "If": // either branch: the condition is not evaluated
		var out []leaf
		if it := items(); len(it) == 3 {
			out = append(s.eval(it[1], depth+1), s.eval(it[2], depth+1)...)
		}
		return out
	case "Select", "Join": // an element of the list, or its parts
		if it := items(); len(it) == 2 {
			return under(s.eval(it[1], depth+1), anyKey)
		}
		return nil
	}
	return s.eval(arg, depth+1)
}

// scalarKey is the key a FindInMap argument names, anyKey when it is not a literal (!Ref AWS::Region).
func scalarKey(n *yaml.Node) string {
	n = docRoot(n)
	if n == nil || n.Kind != yaml.ScalarNode || isIntrinsicTag(n.Tag) {
		return anyKey
	}
	return n.Value
}

// ref is what a Ref to name may be: a parameter's value from the parent stack, else its default; an
// AWS::SSM::Parameter::Value<...> parameter is practice; a resource or pseudo parameter has none known.
func (s *cfnScope) ref(name string, depth int) []leaf {
	key := "Ref " + name
	if l, ok := s.memo[key]; ok {
		return l
	}
	if s.visiting[key] || depth > maxDepth {
		return nil
	}
	s.visiting[key] = true
	defer delete(s.visiting, key)
	p, ok := s.t.params[name]
	if !ok {
		return nil
	}
	var out []leaf
	if ty := get(p, "Type"); ty != nil && strings.HasPrefix(ty.Value, cfnSSMParameterAMI) {
		detail := "parameter " + name
		if d := get(p, "Default"); d != nil {
			detail += " = " + d.Value
		}
		out = []leaf{{value: detail, practice: "AWS::SSM::Parameter::Value", file: s.t.file, line: p.Line}}
	} else if in := get(s.inputs, name); in != nil && s.parent != nil {
		out = through(s.parent.eval(in, depth+1), "parameter "+name+" from "+s.label)
	} else if d := get(p, "Default"); d != nil {
		out = through(s.eval(d, depth+1), "parameter "+name+" default")
	}
	s.memo[key] = out
	return out
}

func (r cfnResource) address() string {
	if r.cdkPath != "" {
		return r.cdkPath
	}
	return r.id
}

// report adds the findings and practices of a stack and of its nested stacks.
func (s *cfnScope) report(depth int) {
	if depth > maxDepth {
		return
	}
	for _, r := range s.t.resources {
		switch {
		case cfnTargets[r.typ]:
			var attrs []tfAttr
			collectJSON(r.props, s.t.file, map[string]bool{"ImageId": true}, &attrs)
			for _, a := range attrs {
				s.sc.rows(s.eval(a.e.j, 0), target{addr: s.addr + r.address(), typ: r.typ, attr: a.name, file: s.t.file,
					line: a.e.j.Line, kind: KindCloudFormation})
			}
		case r.typ == cfnStack:
			s.nested(r, depth)
		}
	}
}

// nested follows a nested stack whose TemplateURL is a local file; any other is reported as not followed,
// with the AMI ids its parameters pass.
func (s *cfnScope) nested(r cfnResource, depth int) {
	urlNode := get(r.props, "TemplateURL")
	params := get(r.props, "Parameters")
	if u, ok := localTemplateURL(urlNode); ok {
		file := path.Join(path.Dir(s.t.file), u)
		for _, f := range s.files {
			if f == file {
				s.sc.warn(s.t.file, urlNode.Line, "nested stack %s includes %s, already on the chain of stacks: not followed again", r.id, u)
				return
			}
		}
		t := s.sc.loadTemplate(file, s.t.file, urlNode.Line)
		if t == nil {
			return
		}
		ch := s.sc.newCFNScope(t)
		ch.addr = s.addr + r.address() + "/"
		ch.inputs, ch.parent, ch.label = params, s, "stack "+s.addr+r.address()
		ch.files = append(append([]string(nil), s.files...), file)
		ch.report(depth + 1)
		return
	}
	line := r.line
	if urlNode != nil {
		line = urlNode.Line
	}
	s.sc.warn(s.t.file, line, "nested stack %s: TemplateURL is not a local file: not followed", s.addr+r.address())
	eachPair(params, func(name string, _, v *yaml.Node) {
		s.sc.rows(s.eval(v, 0), target{addr: s.addr + r.address(), typ: cfnStack, attr: "Parameters." + name, file: s.t.file,
			line: docRoot(v).Line, kind: KindCloudFormation, note: "nested stack template not followed: the AMI is passed to it"})
	})
}

// analyseCloudFormation reports every template that no other template of the scan nests by a local
// TemplateURL.
func (sc *scan) analyseCloudFormation() {
	nested := map[string]bool{}
	for _, f := range sc.tplOrder {
		for _, r := range sc.templates[f].resources {
			if r.typ != cfnStack {
				continue
			}
			if u, ok := localTemplateURL(get(r.props, "TemplateURL")); ok {
				nested[path.Join(path.Dir(f), u)] = true
			}
		}
	}
	for _, f := range append([]string(nil), sc.tplOrder...) {
		if !nested[f] {
			sc.newCFNScope(sc.templates[f]).report(0)
		}
	}
}

// cdkContext is a cdk.context.json: the values CDK looked up at synth and keeps until the context is reset.
type cdkContext struct {
	file string
	root *yaml.Node
}

// analyseContext reports every AMI id the context caches: a MachineImage.lookup ("ami:..." keys) or an SSM
// parameter read with valueFromLookup ("ssm:..." keys) pins the AMI of the next synth.
func (sc *scan) analyseContext(c *cdkContext) {
	eachPair(c.root, func(key string, _, v *yaml.Node) {
		v = docRoot(v)
		if v == nil || v.Kind != yaml.ScalarNode || !amiExact.MatchString(strings.TrimSpace(v.Value)) {
			return
		}
		res, attr, note := key, "lookup", "a value CDK cached at synth: every synth uses this AMI until `cdk context --reset` removes it"
		fields := contextFields(key)
		switch {
		case strings.HasPrefix(key, "ami:"):
			res, attr = "MachineImage.lookup", "ami lookup"
			if n := fields["filters.name.0"]; n != "" {
				res += " name=" + n
			}
		case strings.HasPrefix(key, "ssm:"):
			res, attr = "valueFromLookup "+fields["parameterName"], "ssm lookup"
			note = "the parameter's value CDK cached at synth: use ssm.StringParameter.valueForStringParameter or MachineImage.fromSsmParameter, which CloudFormation resolves at deploy"
		}
		if r := fields["region"]; r != "" {
			res += " (" + r + ")"
		}
		sc.addFinding(Finding{File: c.file, Line: v.Line, Resource: res, ResourceType: "cdk.context.json", ResourceFile: c.file,
			ResourceLine: v.Line, Attribute: attr, ImageID: strings.TrimSpace(v.Value), Via: "literal", Kind: KindCDKContext, Note: note})
	})
}

// contextFields splits a context key ("ami:account=1:filters.name.0=al2023-*:region=eu-west-1") into its fields.
func contextFields(key string) map[string]string {
	out := map[string]string{}
	for _, part := range strings.Split(key, ":")[1:] {
		if k, v, ok := strings.Cut(part, "="); ok {
			out[k] = v
		}
	}
	return out
}
