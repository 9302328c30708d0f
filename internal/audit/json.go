package audit

import (
	"bytes"
	"encoding/json"

	"github.com/patch-agent/patch-agent/internal/schema"
)

// MarshalJSON writes the report as the document of `audit -o json`: schemaVersion (schema.Version) first,
// every field present ([] for no groups, warnings or notes).
func (r Report) MarshalJSON() ([]byte, error) {
	type plain Report // without the method
	if r.Groups == nil {
		r.Groups = []Group{}
	}
	if r.Warnings == nil {
		r.Warnings = []string{}
	}
	return marshal(struct {
		SchemaVersion int `json:"schemaVersion"`
		plain
	}{schema.Version, plain(r)})
}

// countOrNull is a count for JSON: nil (null) when Unknown.
func countOrNull(n int) *int {
	if n == Unknown {
		return nil
	}
	return &n
}

// MarshalJSON writes the group with every field present: daysBehind and releasesBehind null when Unknown
// (the CSV and the table write "unknown"), [] for no AMIs in use, instance types or notes.
func (g Group) MarshalJSON() ([]byte, error) {
	type plain Group
	if g.InUse == nil {
		g.InUse = []AMIUse{}
	}
	if g.InstanceTypes == nil {
		g.InstanceTypes = []string{}
	}
	if g.Notes == nil {
		g.Notes = []string{}
	}
	return marshal(struct {
		plain
		DaysBehind     *int `json:"daysBehind"`
		ReleasesBehind *int `json:"releasesBehind"`
	}{plain(g), countOrNull(g.DaysBehind), countOrNull(g.ReleasesBehind)})
}

// UnmarshalJSON reads a group as MarshalJSON writes it: null daysBehind and releasesBehind are Unknown.
func (g *Group) UnmarshalJSON(b []byte) error {
	type plain Group
	var v struct {
		plain
		DaysBehind     *int `json:"daysBehind"`
		ReleasesBehind *int `json:"releasesBehind"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*g = Group(v.plain)
	g.DaysBehind, g.ReleasesBehind = Unknown, Unknown
	if v.DaysBehind != nil {
		g.DaysBehind = *v.DaysBehind
	}
	if v.ReleasesBehind != nil {
		g.ReleasesBehind = *v.ReleasesBehind
	}
	return nil
}

// marshal is json.Marshal without HTML escaping: notes say "resolve:ssm:<parameter>", not "\u003cparameter\u003e".
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
