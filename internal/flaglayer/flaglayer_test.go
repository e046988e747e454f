package flaglayer

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

func flags(t *testing.T, args ...string) (*pflag.FlagSet, *int, *string, *[]string) {
	t.Helper()
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	fs.String("config", "", "")
	n := fs.Int("max-batch", 32, "")
	s := fs.String("job", "default", "")
	l := fs.StringSlice("join", nil, "")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs, n, s, l
}

func TestApplyPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("job: from-file\nmax_batch: 7\njoin: [a:1, b:2]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TPC_JOB", "from-env")
	fs, n, s, l := flags(t, "--config", file, "--max-batch", "9")
	if err := Apply(fs); err != nil {
		t.Fatal(err)
	}
	if *n != 9 || *s != "from-env" || strings.Join(*l, ",") != "a:1,b:2" {
		t.Fatalf("max-batch %d (flag 9), job %q (env), join %v (file)", *n, *s, *l)
	}
}

func TestApplyErrorsNameTheFlag(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("jbo: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, _, _, _ := flags(t, "--config", file)
	if err := Apply(fs); err == nil || !strings.Contains(err.Error(), "unknown keys [jbo]") {
		t.Fatalf("unknown key: %v", err)
	}
	t.Setenv("TPC_MAX_BATCH", "many")
	fs, _, _, _ = flags(t)
	if err := Apply(fs); err == nil || !strings.Contains(err.Error(), "max-batch (from TPC_MAX_BATCH)") {
		t.Fatalf("bad env value: %v", err)
	}
}

// Args passes on what any layer set, lists joined, and leaves out the
// skipped flags and those at their defaults.
func TestArgs(t *testing.T) {
	t.Setenv("TPC_JOB", "from-env")
	fs, _, _, _ := flags(t, "--config", "", "--join", "a:1", "--join", "b:2")
	if err := Apply(fs); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(Args(fs, "config"), " ")
	if want := "--job=from-env --join=a:1,b:2"; got != want {
		t.Fatalf("Args: %q, want %q", got, want)
	}
	fs, _, _, _ = flags(t, "--max-batch", "32")
	if got := Args(fs, "job"); len(got) != 1 || got[0] != "--max-batch=32" {
		t.Fatalf("a flag set to its default: %q", got)
	}
}

// Rereadable: no file, or a regular one, can be read again; a pipe cannot.
func TestRereadable(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("job: x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	pipe := "/dev/fd/" + strconv.Itoa(int(r.Fd()))
	for _, c := range []struct {
		args []string
		env  string
		want bool
	}{{nil, "", true}, {[]string{"--config", file}, "", true}, {nil, file, true}, {[]string{"--config", pipe}, "", false}, {nil, pipe, false}} {
		if c.env != "" {
			t.Setenv("TPC_CONFIG", c.env)
		}
		fs, _, _, _ := flags(t, c.args...)
		if got := Rereadable(fs); got != c.want {
			t.Errorf("%v, TPC_CONFIG=%q: %v, want %v", c.args, c.env, got, c.want)
		}
	}
}
