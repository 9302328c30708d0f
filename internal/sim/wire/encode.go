package wire

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/xml"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"time"
	"unicode"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/aws/smithy-go/transport/http/protocol/awsjson"
)

// jsonBody encodes an SDK output with the SDK's own awsJson serializer: the output types of the
// schema-serialized services (ECS, SSM, SQS, EventBridge, EKS) describe themselves (Serialize), and the
// protocol's request serializer writes any such value as awsJson does, with the member names and timestamp
// formats of the service model.
func jsonBody(op string, out any) ([]byte, error) {
	s, ok := out.(smithy.Serializable)
	if !ok {
		return nil, fmt.Errorf("%s: the output %T does not describe itself (no Serialize)", op, out)
	}
	placeholder := smithy.NewSchema(smithy.ShapeID{Namespace: "wire", Name: op + "Input"}, smithy.ShapeTypeStructure, 0)
	schema := smithy.NewOperationSchema(smithy.NewSchema(smithy.ShapeID{Namespace: "wire", Name: op}, smithy.ShapeTypeOperation, 0), placeholder, nil)
	service := smithy.NewServiceSchema(smithy.NewSchema(smithy.ShapeID{Namespace: "wire", Name: "Wire"}, smithy.ShapeTypeService, 0), "")
	req := smithyhttp.NewStackRequest().(*smithyhttp.Request)
	if err := awsjson.New10(service).SerializeRequest(context.Background(), schema, s, req); err != nil {
		return nil, err
	}
	stream := req.GetStream()
	if stream == nil {
		return []byte("{}"), nil
	}
	return io.ReadAll(stream)
}

// xmlStyle is how a query protocol names the elements of an answer.
type xmlStyle struct {
	// item names a list's elements: "member" (awsQuery), "item" (EC2).
	item string
	// names, when set, are the element names of the SDK's deserializers by type and field (EC2); fields it does
	// not name are written in lowerCamel. Without names a field's element is its Go name (awsQuery, whose
	// model members are UpperCamel as the Go fields are).
	names map[string]map[string]string
}

func (s xmlStyle) element(t reflect.Type, f reflect.StructField) string {
	if s.names == nil {
		return f.Name
	}
	if n, ok := s.names[t.Name()][f.Name]; ok {
		return n
	}
	r := []rune(f.Name)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}

// xmlMembers writes the members of struct v (an SDK output or data type) as XML elements.
func (s xmlStyle) xmlMembers(b *bytes.Buffer, v reflect.Value) {
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if !f.IsExported() || f.Name == "ResultMetadata" {
			continue
		}
		s.xmlValue(b, s.element(t, f), v.Field(i))
	}
}

var timeType = reflect.TypeOf(time.Time{})

func (s xmlStyle) xmlValue(b *bytes.Buffer, name string, v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return
		}
		if v.Kind() == reflect.Interface {
			return // unions and documents: no answer the agent reads carries one
		}
		s.xmlValue(b, name, v.Elem())
		return
	case reflect.Slice:
		if v.IsNil() {
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			leaf(b, name, base64.StdEncoding.EncodeToString(v.Bytes()))
			return
		}
		b.WriteString("<" + name + ">")
		for i := 0; i < v.Len(); i++ {
			s.xmlValue(b, s.item, v.Index(i))
		}
		b.WriteString("</" + name + ">")
		return
	case reflect.Map:
		if v.IsNil() {
			return
		}
		keys := v.MapKeys()
		sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
		b.WriteString("<" + name + ">")
		for _, k := range keys {
			b.WriteString("<entry>")
			leaf(b, "key", k.String())
			s.xmlValue(b, "value", v.MapIndex(k))
			b.WriteString("</entry>")
		}
		b.WriteString("</" + name + ">")
		return
	case reflect.Struct:
		if v.Type() == timeType {
			leaf(b, name, v.Interface().(time.Time).UTC().Format("2006-01-02T15:04:05.000Z"))
			return
		}
		b.WriteString("<" + name + ">")
		s.xmlMembers(b, v)
		b.WriteString("</" + name + ">")
		return
	case reflect.String:
		if v.Len() == 0 && v.Type().PkgPath() != "" {
			return // an enum left unset
		}
		leaf(b, name, v.String())
	case reflect.Bool:
		leaf(b, name, strconv.FormatBool(v.Bool()))
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		leaf(b, name, strconv.FormatInt(v.Int(), 10))
	case reflect.Float32, reflect.Float64:
		leaf(b, name, strconv.FormatFloat(v.Float(), 'g', -1, v.Type().Bits()))
	}
}

func leaf(b *bytes.Buffer, name, text string) {
	b.WriteString("<" + name + ">")
	_ = xml.EscapeText(b, []byte(text))
	b.WriteString("</" + name + ">")
}
