// Package fielderr is the error a configuration check returns: it names
// the field that is wrong, so that each front end can say it its own way
// (the CLI names the flag, a YAML file its key). Library packages name
// their Config fields; they never name a front end's flags.
package fielderr

import (
	"errors"
	"fmt"
	"strings"
)

// Error says what is wrong with one field of a configuration.
type Error struct {
	// Field is the field's path from the configuration checked, Go field
	// names joined by dots, e.g. "WorldSize" or "NoisePool.Rows".
	Field string
	Err   error
	// Fix lists other fields, any one of which set would resolve the
	// error (a key for an address that reaches the network, say), and
	// Override, if set, the field that accepts the risk instead: each
	// front end names them its own way (Remedy).
	Fix      []string
	Override string
}

// New returns an *Error for field with a formatted message; %w wraps.
func New(field, format string, a ...any) *Error {
	return &Error{Field: field, Err: fmt.Errorf(format, a...)}
}

func (e *Error) Error() string {
	return e.Field + ": " + e.Err.Error() + e.Remedy(func(f string) string { return f })
}
func (e *Error) Unwrap() error { return e.Err }

// Remedy is what Fix and Override say, with name naming each field:
// " (give A, B or C; or D to accept the risk)", or "" if neither is set.
func (e *Error) Remedy(name func(field string) string) string {
	var fix []string
	for _, f := range e.Fix {
		fix = append(fix, name(f))
	}
	give := ""
	switch n := len(fix); n {
	case 0:
	case 1:
		give = "give " + fix[0]
	default:
		give = "give " + strings.Join(fix[:n-1], ", ") + " or " + fix[n-1]
	}
	switch {
	case e.Override == "" && give == "":
		return ""
	case e.Override == "":
		return " (" + give + ")"
	case give == "":
		return " (" + name(e.Override) + " accepts the risk)"
	}
	return " (" + give + "; or " + name(e.Override) + " to accept the risk)"
}

// Within returns err with prefix (the path of a nested configuration) in
// front of its field, if err is an *Error; other errors are returned as
// they are.
func Within(prefix string, err error) error {
	var fe *Error
	if !errors.As(err, &fe) {
		return err
	}
	in := func(f string) string { return prefix + "." + f }
	out := &Error{Field: in(fe.Field), Err: fe.Err}
	for _, f := range fe.Fix {
		out.Fix = append(out.Fix, in(f))
	}
	if fe.Override != "" {
		out.Override = in(fe.Override)
	}
	return out
}
