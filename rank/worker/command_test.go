package worker

import (
	"reflect"
	"strings"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	cases := []struct {
		in   string
		want []string
		err  string
	}{
		{"python3 worker.py --socket {socket}", []string{"python3", "worker.py", "--socket", "{socket}"}, ""},
		{`  a   'b c'  "d \"e\" \\" f\ g `, []string{"a", "b c", `d "e" \`, "f g"}, ""},
		{`x ''`, []string{"x", ""}, ""},
		{"", nil, "empty command"},
		{`a 'b`, nil, "unterminated ' quote"},
		{`a \`, nil, "ends with a backslash"},
	}
	for _, tc := range cases {
		got, err := SplitCommand(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("SplitCommand(%q): %v, want error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestServeConfigValidate(t *testing.T) {
	for v := uint32(0); v <= ProtocolVersion; v++ {
		if err := (&ServeConfig{MaxVersion: v}).Validate(); err != nil {
			t.Errorf("MaxVersion %d: %v", v, err)
		}
	}
	err := (&ServeConfig{MaxVersion: ProtocolVersion + 1}).Validate()
	if err == nil || !strings.HasPrefix(err.Error(), "MaxVersion: this worker speaks protocol versions 1 to") {
		t.Errorf("MaxVersion %d: %v", ProtocolVersion+1, err)
	}
}
