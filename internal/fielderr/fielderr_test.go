package fielderr

import (
	"errors"
	"io"
	"testing"
)

func TestError(t *testing.T) {
	err := New("Rows", "must be >= %d, got %d", 2, 1)
	if got := err.Error(); got != "Rows: must be >= 2, got 1" {
		t.Fatalf("Error() = %q", got)
	}
	nested := Within("NoisePool", err)
	var fe *Error
	if !errors.As(nested, &fe) || fe.Field != "NoisePool.Rows" || fe.Error() != "NoisePool.Rows: must be >= 2, got 1" {
		t.Fatalf("Within: %v", nested)
	}
	wrapped := New("Config", "read: %w", io.ErrUnexpectedEOF)
	if !errors.Is(wrapped, io.ErrUnexpectedEOF) || !errors.Is(Within("Agent", wrapped), io.ErrUnexpectedEOF) {
		t.Fatal("errors.Is does not see through the field error")
	}
	plain := errors.New("plain")
	if Within("X", plain) != plain { //nolint:errorlint // identity is the point: Within must return plain itself, not a wrapper
		t.Fatal("Within changed an error that names no field")
	}
}

// TestRemedy: the fields that would fix an error, and the one that
// accepts the risk, are named the front end's way, nested ones too.
func TestRemedy(t *testing.T) {
	flag := func(f string) string { return "--" + f }
	for _, tc := range []struct {
		err  *Error
		want string
	}{
		{&Error{Field: "A", Err: errors.New("x")}, ""},
		{&Error{Field: "A", Err: errors.New("x"), Fix: []string{"B"}}, " (give --B)"},
		{&Error{Field: "A", Err: errors.New("x"), Fix: []string{"B", "C", "D"}, Override: "E"}, " (give --B, --C or --D; or --E to accept the risk)"},
		{&Error{Field: "A", Err: errors.New("x"), Override: "E"}, " (--E accepts the risk)"},
	} {
		if got := tc.err.Remedy(flag); got != tc.want {
			t.Errorf("Remedy = %q, want %q", got, tc.want)
		}
	}
	err := &Error{Field: "Bind", Err: errors.New("open"), Fix: []string{"Key"}, Override: "Insecure"}
	if got := err.Error(); got != "Bind: open (give Key; or Insecure to accept the risk)" {
		t.Errorf("Error() = %q", got)
	}
	var fe *Error
	if !errors.As(Within("Agent", err), &fe) || fe.Error() != "Agent.Bind: open (give Agent.Key; or Agent.Insecure to accept the risk)" {
		t.Errorf("Within: %v", fe)
	}
}
