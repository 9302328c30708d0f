package iac

import (
	"strings"
)

// leaf is one value an expression may take that matters here: an AMI id written at file:line, or a reference
// to a parameter (practice set). keys is where the leaf sits inside the value evaluated (map keys and list
// indexes, outermost first), so that an index or lookup picks the leaves under its key. via lists the
// references followed, from the attribute towards the literal.
type leaf struct {
	value    string
	practice string // "" for an AMI id; else the kind of parameter reference
	file     string
	line     int
	keys     []string
	via      []string
}

// anyKey is the key of an index whose key is not known (a variable, a function of the region).
const anyKey = "*"

// literal classifies a string written at file:line: an AMI id, a resolve:ssm reference, or nothing.
func literal(v, file string, line int) []leaf {
	t := strings.TrimSpace(v)
	switch {
	case amiExact.MatchString(t):
		return []leaf{{value: t, file: file, line: line}}
	case strings.Contains(t, "{{resolve:ssm:"):
		return []leaf{{value: t, practice: "{{resolve:ssm}}", file: file, line: line}}
	case strings.HasPrefix(t, "resolve:ssm:"):
		return []leaf{{value: t, practice: "resolve:ssm", file: file, line: line}}
	}
	return nil
}

// under returns the leaves under key (anyKey: under every key), their keys one shorter. A leaf with no key
// left (a scalar indexed) is kept: what it indexes is not known.
func under(in []leaf, key string) []leaf {
	var out []leaf
	for _, l := range in {
		if len(l.keys) == 0 {
			out = append(out, l)
			continue
		}
		if key == anyKey || l.keys[0] == key || l.keys[0] == anyKey {
			l.keys = l.keys[1:]
			out = append(out, l)
		}
	}
	return out
}

// prefixed returns the leaves with key put in front of their keys.
func prefixed(in []leaf, key string) []leaf {
	out := make([]leaf, len(in))
	for i, l := range in {
		l.keys = append([]string{key}, l.keys...)
		out[i] = l
	}
	return out
}

// through returns the leaves with step put in front of their via.
func through(in []leaf, step string) []leaf {
	out := make([]leaf, len(in))
	for i, l := range in {
		l.via = append([]string{step}, l.via...)
		out[i] = l
	}
	return out
}

// viaText writes a leaf's via for the report ("literal" when the attribute writes the AMI itself).
func viaText(l leaf) string {
	if len(l.via) == 0 {
		return "literal"
	}
	return strings.Join(l.via, " > ")
}
