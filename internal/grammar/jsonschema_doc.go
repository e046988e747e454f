package grammar

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// kind is the JSON type of a node of a schema document.
type kind uint8

const (
	kNull kind = iota
	kBool
	kNumber
	kString
	kArray
	kObject
)

// node is a JSON value of a schema document. Objects keep their keys in
// document order, which is the order properties are generated in.
type node struct {
	kind kind
	b    bool     // kBool
	str  string   // kString; kNumber: the literal as written
	keys []string // kObject, in document order
	vals []*node  // kObject: the value of keys[i]; kArray: the elements
}

// get returns the value of key in an object, or nil.
func (n *node) get(key string) *node {
	if n == nil || n.kind != kObject {
		return nil
	}
	for i, k := range n.keys {
		if k == key {
			return n.vals[i]
		}
	}
	return nil
}

// parseDoc reads one JSON document, keeping the order of object keys.
func parseDoc(data []byte) (*node, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	n, err := parseNode(dec, "", 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, &SchemaError{Msg: "not one JSON value: there is more after its end"}
	}
	return n, nil
}

func parseNode(dec *json.Decoder, ptr string, depth int) (*node, error) {
	if depth > maxDocDepth {
		return nil, &SchemaError{Pointer: ptr, Msg: fmt.Sprintf("schema too large: nested more than %d deep", maxDocDepth)}
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, &SchemaError{Pointer: ptr, Msg: "not valid JSON: " + err.Error()}
	}
	switch t := tok.(type) {
	case nil:
		return &node{kind: kNull}, nil
	case bool:
		return &node{kind: kBool, b: t}, nil
	case json.Number:
		return &node{kind: kNumber, str: t.String()}, nil
	case string:
		return &node{kind: kString, str: t}, nil
	case json.Delim:
		if t == '[' {
			return parseArray(dec, ptr, depth)
		}
		return parseObject(dec, ptr, depth)
	}
	return nil, &SchemaError{Pointer: ptr, Msg: fmt.Sprintf("not valid JSON: unexpected %v", tok)}
}

func parseArray(dec *json.Decoder, ptr string, depth int) (*node, error) {
	n := &node{kind: kArray}
	for dec.More() {
		v, err := parseNode(dec, ptr+"/"+strconv.Itoa(len(n.vals)), depth+1)
		if err != nil {
			return nil, err
		}
		n.vals = append(n.vals, v)
	}
	if _, err := dec.Token(); err != nil { // ]
		return nil, &SchemaError{Pointer: ptr, Msg: "not valid JSON: " + err.Error()}
	}
	return n, nil
}

func parseObject(dec *json.Decoder, ptr string, depth int) (*node, error) {
	n := &node{kind: kObject}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, &SchemaError{Pointer: ptr, Msg: "not valid JSON: " + err.Error()}
		}
		key, _ := tok.(string) // the decoder only gives strings as keys
		if seen[key] {
			return nil, &SchemaError{Pointer: ptr + "/" + escapePointer(key), Keyword: key, Msg: fmt.Sprintf("key %q appears twice", key)}
		}
		seen[key] = true
		v, err := parseNode(dec, ptr+"/"+escapePointer(key), depth+1)
		if err != nil {
			return nil, err
		}
		n.keys = append(n.keys, key)
		n.vals = append(n.vals, v)
	}
	if _, err := dec.Token(); err != nil { // }
		return nil, &SchemaError{Pointer: ptr, Msg: "not valid JSON: " + err.Error()}
	}
	return n, nil
}

// appendJSON appends n's compact JSON text: no whitespace, strings quoted
// by quoteJSON, numbers as written in the schema.
func (n *node) appendJSON(b []byte) []byte {
	switch n.kind {
	case kNull:
		return append(b, "null"...)
	case kBool:
		return strconv.AppendBool(b, n.b)
	case kNumber:
		return append(b, n.str...)
	case kString:
		return append(b, quoteJSON(n.str)...)
	case kArray:
		b = append(b, '[')
		for i, v := range n.vals {
			if i > 0 {
				b = append(b, ',')
			}
			b = v.appendJSON(b)
		}
		return append(b, ']')
	}
	b = append(b, '{')
	for i, k := range n.keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, quoteJSON(k)...)
		b = append(b, ':')
		b = n.vals[i].appendJSON(b)
	}
	return append(b, '}')
}

// quoteJSON returns s as a JSON string: `"` and `\` escaped, control
// characters as \b \f \n \r \t or \u00xx, everything else as it is.
func quoteJSON(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r < 0x20:
			if e, ok := shortEscapes[r]; ok {
				sb.WriteString(e)
			} else {
				fmt.Fprintf(&sb, `\u%04x`, r)
			}
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}

// shortEscapes are the two-character escapes of control characters.
var shortEscapes = map[rune]string{'\b': `\b`, '\f': `\f`, '\n': `\n`, '\r': `\r`, '\t': `\t`}

// escapePointer escapes one JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}

// unescapePointer undoes escapePointer.
func unescapePointer(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
}
