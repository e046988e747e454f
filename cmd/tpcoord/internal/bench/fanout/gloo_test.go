package fanout

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Without a Python with PyTorch, gloo asked for is an error naming the
// flag, and gloo by default is dropped with a note; other transports stay.
func TestResolveGlooWithoutTorch(t *testing.T) {
	none := []string{filepath.Join(t.TempDir(), "python3")}
	o := Options{Transports: []string{"tcp", "nats", "gloo"}}
	err := o.ResolveGloo(t.Context(), true, none, &bytes.Buffer{})
	if err == nil || !strings.HasPrefix(err.Error(), "--transports: ") || !strings.Contains(err.Error(), none[0]) {
		t.Errorf("explicit gloo: error %v, want one naming --transports and the Python tried", err)
	}
	var note bytes.Buffer
	if err := o.ResolveGloo(t.Context(), false, none, &note); err != nil {
		t.Fatalf("default gloo: %v", err)
	}
	if !slices.Equal(o.Transports, []string{"tcp", "nats"}) || !strings.Contains(note.String(), "gloo transport skipped") {
		t.Errorf("default gloo: transports %v, note %q", o.Transports, note.String())
	}
	o = Options{Transports: []string{"gloo"}, Python: none[0]}
	if err := o.ResolveGloo(t.Context(), false, nil, &bytes.Buffer{}); err == nil || !strings.HasPrefix(err.Error(), "--python: ") {
		t.Errorf("--python without torch: error %v, want one naming --python", err)
	}
	// A Python that runs but has no torch.distributed with gloo.
	o = Options{Transports: []string{"gloo"}, Python: "/bin/true"}
	if err := o.ResolveGloo(t.Context(), false, nil, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no gloo backend") {
		t.Errorf("--python /bin/true: error %v", err)
	}
	// Not asked for: nothing is looked up.
	o = Options{Transports: []string{"tcp"}}
	if err := o.ResolveGloo(t.Context(), true, none, &bytes.Buffer{}); err != nil || o.Python != "" {
		t.Errorf("no gloo: %v, Python %q", err, o.Python)
	}
}

// The gloo helper refuses bad arguments naming the flag, before it imports
// torch (so any python3 runs this test).
func TestGlooHelperBadArgs(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	o := Options{Python: py}
	dir, err := o.writeGloo()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	script := filepath.Join(dir, "gloo_broadcast.py")
	base := []string{script, "follower", "--world", "3", "--rank", "1", "--addr", "file://" + filepath.Join(dir, "s"), "--messages", "10"}
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--payload", "15"}, "--payload"},
		{[]string{"--payload", "1048577"}, "--payload"},
		{[]string{"--rank", "3"}, "--rank"},
		{[]string{"--world", "1"}, "--world"},
		{[]string{"--addr", "tcp://127.0.0.1:1"}, "--addr"},
		{[]string{"--messages", "0"}, "--messages"},
	} {
		out, err := exec.Command(py, append(slices.Clone(base), tc.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.flag) {
			t.Errorf("%v: %v, output %q; want a failure naming %s", tc.args, err, out, tc.flag)
		}
	}
}
