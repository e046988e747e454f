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
