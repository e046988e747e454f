package grammar

import "fmt"

// Kinds of constraint a request names (as api.StructuredOutputs.Kind).
const (
	KindJSON       = "json"
	KindRegex      = "regex"
	KindChoice     = "choice"
	KindGrammar    = "grammar"
	KindJSONObject = "json_object"
)

// Build reads a constraint's source into a grammar: a JSON Schema (json),
// a regular expression, the choices, a GBNF grammar, or any JSON object.
func Build(kind, source string, choices []string) (*Grammar, error) {
	switch kind {
	case KindJSON:
		return FromJSONSchema([]byte(source))
	case KindRegex:
		e, err := FromRegexp(source)
		if err != nil {
			return nil, err
		}
		return Single("regex", e), nil
	case KindChoice:
		return Choice(choices)
	case KindGrammar:
		return ParseGBNF(source)
	case KindJSONObject:
		return JSONObject(), nil
	}
	return nil, fmt.Errorf("unknown kind of constraint %q", kind)
}
