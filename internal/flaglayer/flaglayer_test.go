package flaglayer

import (
	"os"
	"path/filepath"
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
