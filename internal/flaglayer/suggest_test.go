package flaglayer

import (
	"slices"
	"testing"

	"github.com/spf13/pflag"
)

func suggestFlags() *pflag.FlagSet {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int("nproc", 2, "")
	fs.String("ready-file", "", "")
	fs.Int("max-batch", 32, "")
	fs.String("nats", "", "")
	fs.Bool("secret", false, "")
	_ = fs.MarkHidden("secret")
	return fs
}

func TestSuggest(t *testing.T) {
	fs := suggestFlags()
	for name, want := range map[string]string{
		"nprocs": "nproc", "--readyfile": "ready-file", "MAX-BATCH": "max-batch", "max-btch": "max-batch",
		"nat": "nats", "xyz": "", "secrets": "", // hidden flags are not suggested
	} {
		if got := Suggest(fs, name); got != want {
			t.Errorf("Suggest(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestStrays: a TPC_ variable that sets no flag but resembles one is
// named with the one it resembles; the command's own variables and other
// commands' are not.
func TestStrays(t *testing.T) {
	got := Strays(suggestFlags(), []string{"TPC_NPROCS=4", "TPC_NPROC=2", "TPC_REDY_FILE=/x", "TPC_JOB=j", "PATH=/bin", "TPC_=1"})
	want := []string{
		"TPC_NPROCS sets nothing here; did you mean TPC_NPROC?",
		"TPC_REDY_FILE sets nothing here; did you mean TPC_READY_FILE?",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Strays = %q, want %q", got, want)
	}
}
