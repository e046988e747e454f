// Package fielderr is the error a configuration check returns: it names
// the field that is wrong, so that each front end can say it its own way
// (the CLI names the flag, a YAML file its key). Library packages name
// their Config fields; they never name a front end's flags.
package fielderr

import (
	"errors"
	"fmt"
)

// Error says what is wrong with one field of a configuration.
type Error struct {
	// Field is the field's path from the configuration checked, Go field
	// names joined by dots, e.g. "WorldSize" or "NoisePool.Rows".
	Field string
	Err   error
}

// New returns an *Error for field with a formatted message; %w wraps.
func New(field, format string, a ...any) *Error {
	return &Error{Field: field, Err: fmt.Errorf(format, a...)}
}

func (e *Error) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Within returns err with prefix (the path of a nested configuration) in
// front of its field, if err is an *Error; other errors are returned as
// they are.
func Within(prefix string, err error) error {
	var fe *Error
	if !errors.As(err, &fe) {
		return err
	}
	return &Error{Field: prefix + "." + fe.Field, Err: fe.Err}
}
