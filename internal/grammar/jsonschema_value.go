package grammar

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// JSONValue is the grammar of any JSON value in compact form: no
// whitespace outside strings, so that a model cannot pad its output
// without end. Strings follow jsonChar.
func JSONValue() *Grammar {
	var b Builder
	v := b.Rule("value")
	o := b.Rule("object")
	defineAny(&b, v, o)
	return mustGrammar(&b)
}

// JSONObject is the grammar of any compact JSON object (JSONValue's
// object): what response_format json_object asks for.
func JSONObject() *Grammar {
	var b Builder
	o := b.Rule("object")
	v := b.Rule("value")
	defineAny(&b, v, o)
	return mustGrammar(&b)
}

func mustGrammar(b *Builder) *Grammar {
	g, err := b.Grammar()
	if err != nil {
		panic(err) // every rule above is defined
	}
	return g
}

// defineAny gives the rules value and object the bodies of any compact
// JSON value and any compact JSON object.
func defineAny(b *Builder, value, object int) {
	v := Ref(value)
	member := Seq(jsonString(), Lit(":"), v)
	b.Define(object, Seq(Lit("{"), Opt(Seq(member, Star(Seq(Lit(","), member)))), Lit("}")))
	b.Define(value, Alt(Ref(object), listOf(v), jsonString(), jsonNumber(),
		Lit("true"), Lit("false"), Lit("null")))
}

// listOf is a JSON array of any number of v.
func listOf(v *Expr) *Expr {
	return Seq(Lit("["), Opt(Seq(v, Star(Seq(Lit(","), v)))), Lit("]"))
}

// jsonChar is one character of a JSON string: any code point but `"`, `\`
// and U+0000..U+001F as it is, or an escape: \" \\ \/ \b \f \n \r \t, or
// \uXXXX (either case) of any code point but a surrogate (D800..DFFF).
func jsonChar() *Expr {
	hex := hexDigit()
	notSurrogate := Alt(
		Seq(Runes('0', '9', 'a', 'c', 'A', 'C', 'e', 'f', 'E', 'F'), hex, hex, hex),
		Seq(Runes('d', 'd', 'D', 'D'), Runes('0', '7'), hex, hex))
	escape := Alt(Runes('"', '"', '\\', '\\', '/', '/', 'b', 'b', 'f', 'f', 'n', 'n', 'r', 'r', 't', 't'),
		Seq(Lit("u"), notSurrogate))
	return Alt(NotRunes(0, 0x1F, '"', '"', '\\', '\\'), Seq(Lit(`\`), escape))
}

// jsonString is any JSON string.
func jsonString() *Expr { return Seq(Lit(`"`), Star(jsonChar()), Lit(`"`)) }

// jsonNumber is any JSON number.
func jsonNumber() *Expr {
	return Seq(Opt(Lit("-")), Alt(Lit("0"), Seq(Runes('1', '9'), Star(digit()))),
		Opt(Seq(Lit("."), Plus(digit()))),
		Opt(Seq(Runes('e', 'e', 'E', 'E'), Opt(Runes('+', '+', '-', '-')), Plus(digit()))))
}

func digit() *Expr    { return Runes('0', '9') }
func hexDigit() *Expr { return Runes('0', '9', 'a', 'f', 'A', 'F') }

// Type bits, in the order of typeNames.
const (
	tObject uint8 = 1 << iota
	tArray
	tString
	tInteger
	tNumber
	tBoolean
	tNull
	tAll = 1<<iota - 1
)

// types reads type and nullable: the set of types the schema n allows.
func types(n *node, ptr string) (uint8, error) {
	ts := uint8(tAll)
	switch t := n.get("type"); {
	case t == nil:
	case t.kind == kString:
		i := typeIndex(t.str)
		if i < 0 {
			return 0, errAt(ptr, "type", "unknown type %q", t.str)
		}
		ts = 1 << i
	case t.kind == kArray && len(t.vals) > 0:
		ts = 0
		for _, v := range t.vals {
			i := -1
			if v.kind == kString {
				i = typeIndex(v.str)
			}
			if i < 0 {
				return 0, errAt(ptr, "type", "the list may hold only the type names %s", strings.Join(typeNames, ", "))
			}
			ts |= 1 << i
		}
	default:
		return 0, errAt(ptr, "type", "must be a type name or a non-empty list of them")
	}
	switch nb := n.get("nullable"); {
	case nb == nil:
	case nb.kind != kBool:
		return 0, errAt(ptr, "nullable", "must be a boolean")
	case nb.b:
		ts |= tNull
	}
	return ts, nil
}

// typed compiles a schema by its type (or every type when none is given):
// each type's alternative honours the keywords that apply to it.
func (c *compiler) typed(n *node, ptr string) (*Expr, error) {
	ts, err := types(n, ptr)
	if err != nil {
		return nil, err
	}
	if ts&tNumber != 0 {
		ts &^= tInteger // every integer is a number
	}
	var alts []*Expr
	for i, name := range typeNames {
		if ts&(1<<i) == 0 {
			continue
		}
		e, err := c.ofType(name, n, ptr)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return Alt(alts...), nil
}

func (c *compiler) ofType(name string, n *node, ptr string) (*Expr, error) {
	var e *Expr
	var err error
	switch name {
	case "object":
		e, err = c.object(n, ptr)
	case "array":
		e, err = c.array(n, ptr)
	case "string":
		return c.str(n, ptr)
	case "integer":
		return c.integer(n, ptr)
	case "number":
		return c.number(n, ptr)
	case "boolean":
		return Alt(Lit("true"), Lit("false")), nil
	default:
		return Lit("null"), nil
	}
	if err != nil {
		return nil, err
	}
	return c.shared(nameOf(ptr)+"/"+name, e), nil
}

// enum compiles enum or const: the compact JSON text of each value, of the
// types that type and nullable allow.
func (c *compiler) enum(n *node, ptr string, ks kwSet) (*Expr, error) {
	main := ks.has(gEnum)
	if err := alone(ptr, main, ks, gType); err != nil {
		return nil, err
	}
	ts, err := types(n, ptr)
	if err != nil {
		return nil, err
	}
	values := []*node{n.get(main)}
	if main == "enum" {
		if values[0].kind != kArray {
			return nil, errAt(ptr, main, "must be a list of values")
		}
		values = values[0].vals
		if len(values) > MaxEnum {
			return nil, errAt(ptr, main, "schema too large: %d values, at most %d", len(values), MaxEnum)
		}
	}
	var alts []*Expr
	seen := map[string]bool{}
	for _, v := range values {
		text := string(v.appendJSON(nil))
		if !seen[text] && ts&typeOf(v) != 0 {
			seen[text] = true
			alts = append(alts, Lit(text))
		}
	}
	return Alt(alts...), nil
}

// typeOf is the set of types of which v is a value.
func typeOf(v *node) uint8 {
	switch v.kind {
	case kNull:
		return tNull
	case kBool:
		return tBoolean
	case kString:
		return tString
	case kArray:
		return tArray
	case kObject:
		return tObject
	}
	if d, err := splitDecimal(v.str); err == nil && d.exp >= 0 {
		return tNumber | tInteger
	}
	return tNumber
}

// ref compiles $ref: each target is one rule (recursion included).
func (c *compiler) ref(n *node, ptr string, ks kwSet) (*Expr, error) {
	if err := alone(ptr, "$ref", ks); err != nil {
		return nil, err
	}
	v := n.get("$ref")
	if v.kind != kString {
		return nil, errAt(ptr, "$ref", "must be a string")
	}
	target, tn, err := c.resolve(v.str)
	if err != nil {
		return nil, errAt(ptr, "$ref", "%v", err)
	}
	if r, ok := c.refs[target]; ok {
		return Ref(r), nil
	}
	r := c.b.Rule(nameOf(target))
	c.refs[target] = r
	body, err := c.schema(tn, target)
	if err != nil {
		return nil, err
	}
	c.b.Define(r, body)
	return Ref(r), nil
}

// resolve finds the target of a $ref inside the schema: "#" or "#" and a
// JSON pointer. It returns the canonical pointer and the node.
func (c *compiler) resolve(ref string) (string, *node, error) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return "", nil, fmt.Errorf("%q: only references inside the schema (#, #/$defs/name …) are supported", ref)
	}
	frag, err := url.PathUnescape(frag)
	if err != nil {
		return "", nil, fmt.Errorf("%q: %w", ref, err)
	}
	if frag == "" {
		return "", c.root, nil
	}
	if frag[0] != '/' {
		return "", nil, fmt.Errorf("%q: anchors are not supported, only JSON pointers", ref)
	}
	cur, canon := c.root, ""
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = unescapePointer(tok)
		canon += "/" + escapePointer(tok)
		switch cur.kind {
		case kObject:
			cur = cur.get(tok)
		case kArray:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(cur.vals) {
				cur = nil
			} else {
				cur = cur.vals[i]
			}
		default:
			cur = nil
		}
		if cur == nil {
			return "", nil, fmt.Errorf("%q does not resolve to a part of the schema", ref)
		}
	}
	return canon, cur, nil
}
