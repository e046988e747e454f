package grammar

import "strconv"

// combinator compiles anyOf (any branch), allOf of one schema (that
// schema) and oneOf when its branches are of pairwise distinct JSON types
// (then exactly one can match, and oneOf is anyOf).
func (c *compiler) combinator(n *node, ptr string, ks kwSet) (*Expr, error) {
	main := ks.has(gCombinator)
	if err := alone(ptr, main, ks); err != nil {
		return nil, err
	}
	list := n.get(main)
	if list.kind != kArray || len(list.vals) == 0 {
		return nil, errAt(ptr, main, "must be a non-empty list of schemas")
	}
	switch main {
	case "allOf":
		if len(list.vals) != 1 {
			return nil, errAt(ptr, main, "supported with one schema only, not %d", len(list.vals))
		}
	case "oneOf":
		if err := c.disjoint(list.vals, ptr); err != nil {
			return nil, err
		}
	}
	alts := make([]*Expr, len(list.vals))
	for i, s := range list.vals {
		e, err := c.schema(s, keywordAt(ptr, main)+"/"+strconv.Itoa(i))
		if err != nil {
			return nil, err
		}
		alts[i] = e
	}
	return Alt(alts...), nil
}

// disjoint refuses a oneOf whose branches are not provably exclusive: two
// branches that may match values of the same JSON type.
func (c *compiler) disjoint(branches []*node, ptr string) error {
	seen := uint8(0)
	for i, b := range branches {
		ts := c.kinds(b, 0)
		if ts&seen != 0 {
			return errAt(ptr, "oneOf", "supported only when its schemas are of distinct JSON types (schema %d may match a value of the same type as one before it)", i)
		}
		seen |= ts
	}
	return nil
}

// kinds is the set of JSON types (integer folded into number) that schema
// n may match values of, over-approximated.
func (c *compiler) kinds(n *node, depth int) uint8 {
	fold := func(ts uint8) uint8 {
		if ts&tInteger != 0 {
			ts = ts&^tInteger | tNumber
		}
		return ts
	}
	switch {
	case n.kind == kBool && !n.b:
		return 0
	case n.kind != kObject || depth > MaxSchemaDepth:
		return tAll
	}
	if r := n.get("$ref"); r != nil && r.kind == kString {
		if _, t, err := c.resolve(r.str); err == nil {
			return c.kinds(t, depth+1)
		}
		return tAll
	}
	if alts := n.get("anyOf"); alts != nil && alts.kind == kArray {
		ts := uint8(0)
		for _, b := range alts.vals {
			ts |= c.kinds(b, depth+1)
		}
		return ts
	}
	ts, err := types(n, "")
	if err != nil {
		return tAll
	}
	for _, k := range []string{"enum", "const"} {
		if v := n.get(k); v != nil {
			vals := []*node{v}
			if k == "enum" && v.kind == kArray {
				vals = v.vals
			}
			var vt uint8
			for _, x := range vals {
				vt |= typeOf(x)
			}
			ts &= vt
		}
	}
	return fold(ts)
}
