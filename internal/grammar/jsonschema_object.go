package grammar

import (
	"strconv"
)

// member is one property an object schema generates.
type member struct {
	expr     *Expr // "key":value
	required bool
}

// object compiles an object schema. With properties, only the listed
// properties are generated, in the schema's order (then any required name
// not listed, with additionalProperties' schema), whatever
// additionalProperties says: an object with only listed properties is
// valid under every additionalProperties. Without properties,
// additionalProperties (absent or true: any value; a schema: that schema;
// false: none) gives the values of any further members, after the
// required ones.
func (c *compiler) object(n *node, ptr string) (*Expr, error) {
	props, extra := n.get("properties"), n.get("additionalProperties")
	if props != nil && props.kind != kObject {
		return nil, errAt(ptr, "properties", "must be an object of schemas")
	}
	if extra != nil && extra.kind != kBool && extra.kind != kObject {
		return nil, errAt(ptr, "additionalProperties", "must be a schema")
	}
	required, err := requiredNames(n, ptr)
	if err != nil {
		return nil, err
	}
	members, err := c.listed(props, required, ptr)
	if err != nil {
		return nil, err
	}
	noExtra := extra != nil && extra.kind == kBool && !extra.b
	var value *Expr // of members not in properties
	if !noExtra {
		value = c.anyValueRef()
		if extra != nil && extra.kind == kObject {
			at := keywordAt(ptr, "additionalProperties")
			if value, err = c.schema(extra, at); err != nil {
				return nil, err
			}
			value = c.shared(nameOf(at), value)
		}
	}
	for i, name := range required {
		if props.get(name) != nil {
			continue
		}
		if noExtra {
			return nil, &SchemaError{Pointer: keywordAt(ptr, "required") + "/" + strconv.Itoa(i), Keyword: "required",
				Msg: "required: " + quoteJSON(name) + " is not in properties and additionalProperties is false"}
		}
		members = append(members, member{expr: Seq(Lit(quoteJSON(name)+":"), value), required: true})
	}
	var rest *Expr // further members, when there is no properties
	if props == nil && !noExtra {
		rest = Seq(jsonString(), Lit(":"), value)
	}
	return Seq(Lit("{"), c.membersExpr(members, rest, ptr), Lit("}")), nil
}

// requiredNames reads required: distinct names, at most MaxProperties.
func requiredNames(n *node, ptr string) ([]string, error) {
	r := n.get("required")
	if r == nil {
		return nil, nil
	}
	if r.kind != kArray {
		return nil, errAt(ptr, "required", "must be a list of property names")
	}
	if len(r.vals) > MaxProperties {
		return nil, errAt(ptr, "required", "schema too large: %d names, at most %d", len(r.vals), MaxProperties)
	}
	var names []string
	seen := map[string]bool{}
	for _, v := range r.vals {
		if v.kind != kString {
			return nil, errAt(ptr, "required", "must be a list of property names")
		}
		if seen[v.str] {
			return nil, errAt(ptr, "required", "%s is listed twice", quoteJSON(v.str))
		}
		seen[v.str] = true
		names = append(names, v.str)
	}
	return names, nil
}

// listed compiles the members of properties, in the schema's order.
func (c *compiler) listed(props *node, required []string, ptr string) ([]member, error) {
	if props == nil {
		return nil, nil
	}
	if len(props.keys) > MaxProperties {
		return nil, errAt(ptr, "properties", "schema too large: %d properties, at most %d", len(props.keys), MaxProperties)
	}
	isRequired := map[string]bool{}
	for _, name := range required {
		isRequired[name] = true
	}
	members := make([]member, len(props.keys))
	for i, name := range props.keys {
		at := keywordAt(ptr, "properties") + "/" + escapePointer(name)
		v, err := c.schema(props.vals[i], at)
		if err != nil {
			return nil, err
		}
		members[i] = member{expr: Seq(Lit(quoteJSON(name)+":"), c.shared(nameOf(at), v)), required: isRequired[name]}
	}
	return members, nil
}

// membersExpr is the members in order, each optional one present or not,
// with commas between those present, then any number of rest (nil: none).
// It is built from the end: after(i) is the members from i on when one
// came before (each takes a comma), first(i) when none did. When there
// are several optional members, each after(i) is a rule, so that first
// does not copy it.
func (c *compiler) membersExpr(members []member, rest *Expr, ptr string) *Expr {
	after, first := Empty(), Empty()
	if rest != nil {
		after = Star(Seq(Lit(","), rest))
		first = Opt(Seq(rest, after))
	}
	optional := 0
	for _, m := range members {
		if !m.required {
			optional++
		}
	}
	for i := len(members) - 1; i >= 0; i-- {
		m := members[i]
		if m.required {
			first = Seq(m.expr, after)
			after = Seq(Lit(","), m.expr, after)
		} else {
			first = Alt(Seq(m.expr, after), first)
			after = Seq(Opt(Seq(Lit(","), m.expr)), after)
		}
		if optional > 2 && i > 0 && weight(after, shareWeight) >= shareWeight {
			after = c.shared(nameOf(ptr)+"/after/"+strconv.Itoa(i), after)
		}
	}
	return first
}

// array compiles an array schema: prefixItems in order, then items (absent:
// any value; false: none), between minItems and maxItems elements.
func (c *compiler) array(n *node, ptr string) (*Expr, error) {
	if u := n.get("uniqueItems"); u != nil && (u.kind != kBool || u.b) {
		return nil, errAt(ptr, "uniqueItems", "only false is supported")
	}
	minN, _, err := count(n, ptr, "minItems")
	if err != nil {
		return nil, err
	}
	maxN, hasMax, err := count(n, ptr, "maxItems")
	if err != nil {
		return nil, err
	}
	if !hasMax {
		maxN = -1
	}
	prefix, err := c.prefixItems(n, ptr)
	if err != nil {
		return nil, err
	}
	items, err := c.items(n, ptr, minN, maxN)
	if err != nil {
		return nil, err
	}
	if items == nil && (maxN < 0 || maxN > len(prefix)) {
		maxN = len(prefix)
	}
	if maxN >= 0 && minN > maxN {
		return Nothing(), nil
	}
	return Seq(Lit("["), elements(prefix, items, minN, maxN), Lit("]")), nil
}

// prefixItems compiles prefixItems.
func (c *compiler) prefixItems(n *node, ptr string) ([]*Expr, error) {
	p := n.get("prefixItems")
	if p == nil {
		return nil, nil
	}
	if p.kind != kArray {
		return nil, errAt(ptr, "prefixItems", "must be a list of schemas")
	}
	if len(p.vals) > MaxProperties {
		return nil, errAt(ptr, "prefixItems", "schema too large: %d schemas, at most %d", len(p.vals), MaxProperties)
	}
	out := make([]*Expr, len(p.vals))
	for i, s := range p.vals {
		at := keywordAt(ptr, "prefixItems") + "/" + strconv.Itoa(i)
		e, err := c.schema(s, at)
		if err != nil {
			return nil, err
		}
		out[i] = c.shared(nameOf(at), e)
	}
	return out, nil
}

// items compiles items (nil: no element past prefixItems). A bounded count
// of items over one element gets the item its own rule, so that the
// copies are references.
func (c *compiler) items(n *node, ptr string, minN, maxN int) (*Expr, error) {
	it := n.get("items")
	switch {
	case it == nil:
		return c.anyValueRef(), nil
	case it.kind == kArray:
		return nil, errAt(ptr, "items", "a list is the tuple form of draft 2019 and earlier: use prefixItems")
	case it.kind == kBool && !it.b:
		return nil, nil
	}
	at := keywordAt(ptr, "items")
	e, err := c.schema(it, at)
	if err != nil {
		return nil, err
	}
	if (minN > 1 || maxN > 1) && e.Op != OpRef && weight(e, 4) >= 4 {
		r := c.b.Rule(nameOf(at))
		c.b.Define(r, e)
		return Ref(r), nil
	}
	return c.shared(nameOf(at), e), nil
}

// elements is the elements of an array between its brackets: element i is
// prefix[i], or items past the prefix (nil: none); from minN to maxN (< 0:
// no bound) of them.
func elements(prefix []*Expr, items *Expr, minN, maxN int) *Expr {
	elem := func(i int) *Expr {
		if i < len(prefix) {
			return prefix[i]
		}
		return items
	}
	// tail(i): the elements from i on, i >= 1 elements having come before.
	var tail func(i int) *Expr
	tail = func(i int) *Expr {
		if i >= len(prefix) {
			if items == nil {
				return Empty()
			}
			hi := -1
			if maxN >= 0 {
				hi = maxN - i
			}
			return Repeat(Seq(Lit(","), items), max(minN-i, 0), hi)
		}
		var alts []*Expr
		if i >= minN {
			alts = append(alts, Empty())
		}
		if maxN < 0 || i < maxN {
			alts = append(alts, Seq(Lit(","), elem(i), tail(i+1)))
		}
		return Alt(alts...)
	}
	var alts []*Expr
	if minN == 0 {
		alts = append(alts, Empty())
	}
	if maxN != 0 && elem(0) != nil {
		alts = append(alts, Seq(elem(0), tail(1)))
	}
	return Alt(alts...)
}
