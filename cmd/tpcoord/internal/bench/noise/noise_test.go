package noise

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestOptionsValidate(t *testing.T) {
	ok := Options{Vocab: 64, Rows: 1, Producers: []int{1, 2}, Iters: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	for _, tc := range []struct {
		edit func(*Options)
		flag string
	}{
		{func(o *Options) { o.Vocab = 0 }, "--vocab"},
		{func(o *Options) { o.Vocab = 1<<24 + 1 }, "--vocab"},
		{func(o *Options) { o.Rows = 0 }, "--rows"},
		{func(o *Options) { o.Iters = 0 }, "--iters"},
		{func(o *Options) { o.Producers = nil }, "--producers"},
		{func(o *Options) { o.Producers = []int{1, 257} }, "--producers"},
	} {
		o := ok
		tc.edit(&o)
		if err := o.Validate(); err == nil || !strings.HasPrefix(err.Error(), tc.flag+":") {
			t.Errorf("%+v: error %v, want one naming %s", o, err, tc.flag)
		}
	}
}

// A cancelled run stops before its first case and prints no result.
func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var out bytes.Buffer
	err := Run(ctx, Options{Vocab: 64, Rows: 1, Producers: []int{1}, Iters: 1, JSON: true}, &out, &bytes.Buffer{})
	if !errors.Is(err, context.Canceled) || out.Len() != 0 {
		t.Errorf("err %v, output %q", err, out.String())
	}
}
