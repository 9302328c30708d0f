package wire

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

// formTree turns the parameters of a query-protocol request into a tree: "A.B" nests a map, a numeric segment
// indexes a list ("Filter.1.Value.2" in EC2's flattened lists), and the awsQuery wrappers "member" (lists) and
// "entry"/"key"/"value" (maps) are removed, so that "AutoScalingGroupNames.member.1" reads as a list.
func formTree(form url.Values) (map[string]any, error) {
	root := map[string]any{}
	for key, vals := range form {
		if key == "Action" || key == "Version" || len(vals) == 0 {
			continue
		}
		segs := strings.Split(key, ".")
		cur := root
		for i, s := range segs {
			if i == len(segs)-1 {
				cur[s] = vals[0]
				break
			}
			next, ok := cur[s].(map[string]any)
			if !ok {
				if _, isLeaf := cur[s]; isLeaf {
					return nil, fmt.Errorf("parameter %s is both a value and a structure", key)
				}
				next = map[string]any{}
				cur[s] = next
			}
			cur = next
		}
	}
	return normalize(root).(map[string]any), nil
}

// normalize turns maps whose keys are all numbers into lists (in index order) and drops the member/entry
// wrappers of the awsQuery protocol.
func normalize(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	for k, c := range m {
		m[k] = normalize(c)
	}
	if len(m) == 1 {
		if l, ok := m["member"].([]any); ok {
			return l
		}
		if l, ok := m["entry"].([]any); ok {
			out := map[string]any{}
			for _, e := range l {
				if em, ok := e.(map[string]any); ok {
					if k, ok := em["key"].(string); ok {
						out[k] = em["value"]
					}
				}
			}
			return out
		}
	}
	idx := make([]int, 0, len(m))
	for k := range m {
		n, err := strconv.Atoi(k)
		if err != nil || n < 1 {
			return m
		}
		idx = append(idx, n)
	}
	if len(idx) == 0 {
		return m
	}
	sort.Ints(idx)
	out := make([]any, 0, len(idx))
	for _, n := range idx {
		out = append(out, m[strconv.Itoa(n)])
	}
	return out
}

// jsonTree decodes the body of a JSON-protocol request.
func jsonTree(body []byte) (map[string]any, error) {
	if len(bytes.TrimSpace(body)) == 0 {
		return map[string]any{}, nil
	}
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("request body is not a JSON object: %w", err)
	}
	return m, nil
}

// decoder assigns a tree to an SDK input struct by reflection. A key matches the field its generated
// serializer writes it from (wire, for EC2), else the field of the same name ignoring case (awsQuery and the
// JSON protocols name members as the Go fields are named, in lowerCamel or UpperCamel). A key no field takes is
// an error: the served world never ignores a parameter it does not understand.
type decoder struct {
	wire map[string]map[string]string // type -> field -> key (nil: by name)
}

func (d decoder) assign(v reflect.Value, node any, path string) error {
	if node == nil {
		return nil
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		return d.assign(v.Elem(), node, path)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			t, err := parseTime(node)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			v.Set(reflect.ValueOf(t))
			return nil
		}
		m, ok := node.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: a structure expected, got %T", path, node)
		}
		for k, c := range m {
			f, ok := d.field(v.Type(), k)
			if !ok {
				return fmt.Errorf("%s: unknown parameter %q for %s", path, k, v.Type().Name())
			}
			if err := d.assign(v.FieldByIndex(f.Index), c, join(path, k)); err != nil {
				return err
			}
		}
		return nil
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			s, ok := node.(string)
			if !ok {
				return fmt.Errorf("%s: base64 text expected", path)
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			v.SetBytes(b)
			return nil
		}
		l, ok := node.([]any)
		if !ok {
			l = []any{node}
		}
		s := reflect.MakeSlice(v.Type(), len(l), len(l))
		for i, c := range l {
			if err := d.assign(s.Index(i), c, fmt.Sprintf("%s.%d", path, i+1)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Map:
		m, ok := node.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: a map expected, got %T", path, node)
		}
		out := reflect.MakeMapWithSize(v.Type(), len(m))
		for k, c := range m {
			e := reflect.New(v.Type().Elem()).Elem()
			if err := d.assign(e, c, join(path, k)); err != nil {
				return err
			}
			out.SetMapIndex(reflect.ValueOf(k).Convert(v.Type().Key()), e)
		}
		v.Set(out)
		return nil
	case reflect.String:
		s, err := text(node)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		v.SetString(s)
		return nil
	case reflect.Bool:
		switch b := node.(type) {
		case bool:
			v.SetBool(b)
		case string:
			p, err := strconv.ParseBool(b)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			v.SetBool(p)
		default:
			return fmt.Errorf("%s: a boolean expected, got %T", path, node)
		}
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		s, err := text(node)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		v.SetInt(n)
		return nil
	case reflect.Float32, reflect.Float64:
		s, err := text(node)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		f, err := strconv.ParseFloat(s, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		v.SetFloat(f)
		return nil
	}
	return fmt.Errorf("%s: the served world does not decode %s parameters", path, v.Type())
}

func (d decoder) field(t reflect.Type, key string) (reflect.StructField, bool) {
	if w := d.wire[t.Name()]; w != nil {
		for field, k := range w {
			if strings.EqualFold(k, key) {
				if f, ok := t.FieldByName(field); ok {
					return f, true
				}
			}
		}
	}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.IsExported() && strings.EqualFold(f.Name, key) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func text(node any) (string, error) {
	switch s := node.(type) {
	case string:
		return s, nil
	case json.Number:
		return s.String(), nil
	case bool:
		return strconv.FormatBool(s), nil
	}
	return "", fmt.Errorf("a value expected, got %T", node)
}

func parseTime(node any) (time.Time, error) {
	if n, ok := node.(json.Number); ok {
		f, err := n.Float64()
		if err != nil {
			return time.Time{}, err
		}
		return time.Unix(0, int64(f*1e9)).UTC(), nil
	}
	s, err := text(node)
	if err != nil {
		return time.Time{}, err
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return time.Unix(0, int64(f*1e9)).UTC(), nil
	}
	return time.Parse(time.RFC3339Nano, s)
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}
