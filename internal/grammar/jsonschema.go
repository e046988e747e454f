package grammar

import (
	"fmt"
	"slices"
)

// The bounds of what FromJSONSchema accepts. A schema past one is refused
// with a SchemaError whose message starts with "schema too large", so that
// no schema can make the grammar blow up.
const (
	// MaxSchemaBytes bounds the schema document's size.
	MaxSchemaBytes = 1 << 20
	// MaxSchemaDepth bounds how deeply subschemas nest (through properties,
	// items, anyOf … and $ref chains being compiled).
	MaxSchemaDepth = 64
	// MaxProperties bounds the properties (and required names) of one object.
	MaxProperties = 512
	// MaxEnum bounds the values of one enum.
	MaxEnum = 4096
	// MaxRepeat bounds minLength, maxLength, minItems and maxItems: a bounded
	// count is expanded into that many copies.
	MaxRepeat = 10_000
	// MaxBoundDigits bounds the decimal digits (integer and fraction part) of
	// minimum, maximum, exclusiveMinimum and exclusiveMaximum.
	MaxBoundDigits = 100
	// MaxGrammarSize bounds the grammar's size, counted in expression nodes
	// with bounded repeats expanded.
	MaxGrammarSize = 500_000

	maxDocDepth = 2*MaxSchemaDepth + 8 // JSON nesting of the document
)

// SchemaError is why FromJSONSchema refused a schema.
type SchemaError struct {
	// Pointer is the JSON pointer (RFC 6901) of the offending keyword or
	// value, such as "/properties/age/multipleOf"; "" is the whole schema.
	Pointer string
	// Keyword is the keyword refused or at fault; "" when it is the whole
	// schema or a value rather than a keyword.
	Keyword string
	// Msg says what is wrong.
	Msg string
}

func (e *SchemaError) Error() string {
	at := e.Pointer
	if at == "" {
		at = "(root)"
	}
	return fmt.Sprintf("json schema: %s: %s", at, e.Msg)
}

// FromJSONSchema compiles a JSON Schema (draft 2020-12, with OpenAPI's
// nullable; the subset that OpenAI's strict mode uses and more) to a grammar
// of the compact JSON texts that the schema accepts: no whitespace between
// tokens, properties in the order the schema lists them. Every text the
// grammar matches validates against the schema; a keyword that cannot be
// honoured exactly is refused, never ignored. docs/structured-outputs.md
// lists what is supported. Errors are *SchemaError.
func FromJSONSchema(schema []byte) (*Grammar, error) {
	if len(schema) > MaxSchemaBytes {
		return nil, &SchemaError{Msg: fmt.Sprintf("schema too large: %d bytes, at most %d", len(schema), MaxSchemaBytes)}
	}
	root, err := parseDoc(schema)
	if err != nil {
		return nil, err
	}
	if root.kind == kBool && !root.b {
		return nil, &SchemaError{Msg: "the schema is false: no value satisfies it"}
	}
	c := &compiler{root: root, refs: map[string]int{}, anyValue: -1, char: -1}
	start := c.b.Rule("#")
	c.refs[""] = start
	body, err := c.schema(root, "")
	if err != nil {
		return nil, err
	}
	c.b.Define(start, body)
	g, err := c.b.Grammar()
	if err != nil {
		return nil, fmt.Errorf("json schema: internal error: %w", err)
	}
	if err := checkGrammar(g); err != nil {
		return nil, err
	}
	return g, nil
}

// compiler turns schema nodes into expressions, adding rules to b for
// $ref targets, shared subschemas and the JSON value of `true` schemas.
type compiler struct {
	root     *node
	b        Builder
	refs     map[string]int // JSON pointer of a $ref target → its rule
	anyValue int            // rule of any JSON value; -1 until needed
	anyObj   int            // rule of any JSON object (with anyValue)
	char     int            // rule of one JSON string character; -1 until needed
	depth    int
}

// schema compiles the subschema n found at JSON pointer ptr.
func (c *compiler) schema(n *node, ptr string) (*Expr, error) {
	switch {
	case n.kind == kBool && n.b:
		return c.anyValueRef(), nil
	case n.kind == kBool:
		return Nothing(), nil
	case n.kind != kObject:
		return nil, &SchemaError{Pointer: ptr, Msg: "a schema must be an object or a boolean"}
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > MaxSchemaDepth {
		return nil, &SchemaError{Pointer: ptr, Msg: fmt.Sprintf("schema too large: subschemas nest more than %d deep", MaxSchemaDepth)}
	}
	ks, err := c.classify(n, ptr)
	if err != nil {
		return nil, err
	}
	switch {
	case ks.has(gRef) != "":
		return c.ref(n, ptr, ks)
	case ks.has(gCombinator) != "":
		return c.combinator(n, ptr, ks)
	case ks.has(gEnum) != "":
		return c.enum(n, ptr, ks)
	}
	return c.typed(n, ptr)
}

// group is a family of keywords that are compiled together.
type group uint8

const (
	gAnnotation group = iota
	gDefs
	gRef
	gCombinator
	gEnum
	gType
	gString
	gNumber
	gObject
	gArray
	nGroups
)

// keywords are the keywords FromJSONSchema honours, by family.
var keywords = map[string]group{
	"title": gAnnotation, "description": gAnnotation, "default": gAnnotation,
	"examples": gAnnotation, "$schema": gAnnotation, "$id": gAnnotation,
	"$comment": gAnnotation, "deprecated": gAnnotation, "readOnly": gAnnotation,
	"writeOnly": gAnnotation,
	"$defs":     gDefs, "definitions": gDefs,
	"$ref":  gRef,
	"anyOf": gCombinator, "allOf": gCombinator, "oneOf": gCombinator,
	"enum": gEnum, "const": gEnum,
	"type": gType, "nullable": gType,
	"minLength": gString, "maxLength": gString, "pattern": gString, "format": gString,
	"minimum": gNumber, "maximum": gNumber, "exclusiveMinimum": gNumber, "exclusiveMaximum": gNumber,
	"properties": gObject, "required": gObject, "additionalProperties": gObject,
	"items": gArray, "prefixItems": gArray, "minItems": gArray, "maxItems": gArray, "uniqueItems": gArray,
}

// refused explains the keywords of JSON Schema that are refused.
var refused = map[string]string{
	"multipleOf":            "multipleOf is not supported",
	"patternProperties":     "patternProperties is not supported",
	"propertyNames":         "propertyNames is not supported",
	"minProperties":         "minProperties is not supported",
	"maxProperties":         "maxProperties is not supported",
	"dependentRequired":     "dependentRequired is not supported",
	"dependentSchemas":      "dependentSchemas is not supported",
	"dependencies":          "dependencies is not supported",
	"unevaluatedProperties": "unevaluatedProperties is not supported",
	"unevaluatedItems":      "unevaluatedItems is not supported",
	"contains":              "contains is not supported",
	"minContains":           "minContains is not supported",
	"maxContains":           "maxContains is not supported",
	"additionalItems":       "additionalItems is not supported (draft 2019 and earlier: use prefixItems and items)",
	"not":                   "not is not supported",
	"if":                    "if/then/else is not supported",
	"then":                  "if/then/else is not supported",
	"else":                  "if/then/else is not supported",
	"$anchor":               "$anchor is not supported: $ref may point with a JSON pointer only",
	"$dynamicRef":           "$dynamicRef is not supported",
	"$dynamicAnchor":        "$dynamicAnchor is not supported",
	"$recursiveRef":         "$recursiveRef is not supported",
	"$recursiveAnchor":      "$recursiveAnchor is not supported",
	"$vocabulary":           "$vocabulary is not supported",
	"contentEncoding":       "contentEncoding is not supported",
	"contentMediaType":      "contentMediaType is not supported",
	"contentSchema":         "contentSchema is not supported",
	"discriminator":         "discriminator is not supported",
}

// kwSet lists the keywords of a schema object by family, in document order.
type kwSet [nGroups][]string

// has returns the first keyword of family g, or "".
func (ks *kwSet) has(g group) string {
	if len(ks[g]) == 0 {
		return ""
	}
	return ks[g][0]
}

// classify checks every keyword of the schema object n and sorts them by
// family.
func (c *compiler) classify(n *node, ptr string) (kwSet, error) {
	var ks kwSet
	for _, k := range n.keys {
		g, ok := keywords[k]
		if !ok {
			msg, known := refused[k]
			if !known {
				msg = fmt.Sprintf("unknown keyword %q (only the keywords docs/structured-outputs.md lists are honoured)", k)
			}
			return ks, &SchemaError{Pointer: keywordAt(ptr, k), Keyword: k, Msg: msg}
		}
		if k == "$id" && ptr != "" {
			return ks, errAt(ptr, k, "supported at the root only")
		}
		ks[g] = append(ks[g], k)
	}
	return ks, nil
}

// alone refuses the keywords of ks other than main, annotations, $defs and
// the families in also: beside main they would constrain its values
// further, which is not supported.
func alone(ptr, main string, ks kwSet, also ...group) error {
	for g, list := range ks {
		if group(g) == gAnnotation || group(g) == gDefs || slices.Contains(also, group(g)) {
			continue
		}
		for _, k := range list {
			if k != main {
				return errAt(ptr, k, "not supported beside %s", main)
			}
		}
	}
	return nil
}

// anyValueRef returns a reference to the rule of any JSON value.
func (c *compiler) anyValueRef() *Expr {
	if c.anyValue < 0 {
		c.anyValue = c.b.Rule("any-value")
		c.anyObj = c.b.Rule("any-object")
		defineAny(&c.b, c.anyValue, c.anyObj)
	}
	return Ref(c.anyValue)
}

// shared returns e, or a reference to a new rule of body e when e is big
// enough that copying it (optional properties, bounded repeats) would cost.
func (c *compiler) shared(name string, e *Expr) *Expr {
	if e.Op == OpRef || weight(e, shareWeight) < shareWeight {
		return e
	}
	r := c.b.Rule(name)
	c.b.Define(r, e)
	return Ref(r)
}

// shareWeight is the size past which a subschema gets its own rule.
const shareWeight = 24

// weight counts e's nodes, stopping at limit.
func weight(e *Expr, limit int) int {
	n := 1
	for _, s := range e.Subs {
		if n >= limit {
			break
		}
		n += weight(s, limit-n)
	}
	return n
}

// keywordAt is the pointer of keyword k of the schema at ptr.
func keywordAt(ptr, k string) string { return ptr + "/" + escapePointer(k) }

// errAt returns a SchemaError about keyword k of the schema at ptr.
func errAt(ptr, k, format string, args ...any) *SchemaError {
	return &SchemaError{Pointer: keywordAt(ptr, k), Keyword: k, Msg: k + ": " + fmt.Sprintf(format, args...)}
}

// nameOf is a rule name for the schema at ptr.
func nameOf(ptr string) string {
	if ptr == "" {
		return "#"
	}
	return "#" + ptr
}

// typeNames are the names of JSON Schema's types, in the order their
// alternatives are generated.
var typeNames = []string{"object", "array", "string", "integer", "number", "boolean", "null"}

func typeIndex(name string) int { return slices.Index(typeNames, name) }
