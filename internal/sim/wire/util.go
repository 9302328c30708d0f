package wire

import (
	"bytes"
	"encoding/xml"
	"io"
)

func newBuffer() *bytes.Buffer { return &bytes.Buffer{} }

func xmlEscape(w io.Writer, s string) error { return xml.EscapeText(w, []byte(s)) }
