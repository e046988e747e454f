package membership

import (
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestAcceptBacksOffOutOfFiles runs the accept loop out of file
// descriptors, for real: a child test process lowers its own limit (the
// limit is the whole process's), fills it, and connects. Accept fails with
// EMFILE; the loop must log and pause 5 ms, then 10 ms, and hand the
// connection to memberlist once descriptors are free again.
func TestAcceptBacksOffOutOfFiles(t *testing.T) {
	if os.Getenv(emfileChild) == "1" {
		acceptOutOfFiles(t)
		return
	}
	args := []string{"-test.run=^TestAcceptBacksOffOutOfFiles$", "-test.count=1", "-test.v"}
	if d, ok := t.Deadline(); ok {
		args = append(args, "-test.timeout="+time.Until(d).Round(time.Second).String())
	}
	cmd := exec.CommandContext(t.Context(), os.Args[0], args...)
	cmd.Env = append(os.Environ(), emfileChild+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the child test failed: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "--- SKIP") {
		t.Skipf("the child test skipped:\n%s", out)
	}
}

// emfileChild marks the child process of TestAcceptBacksOffOutOfFiles in
// its environment.
const emfileChild = "TPC_TEST_EMFILE_CHILD"

func acceptOutOfFiles(t *testing.T) {
	h := recordHandler{records: make(chan slog.Record, 64)}
	s, err := newSockets("127.0.0.1", 0, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown()
	fillers := fillDescriptors(t)
	fillers[0].Close() // one descriptor left: the dialing end's
	c, err := s.DialTimeout(s.addr(), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, want := range []time.Duration{5 * time.Millisecond, 10 * time.Millisecond} {
		r := nextRecord(t, h.records)
		if r.Message != "accepting a memberlist connection" || retryIn(r) != want {
			t.Fatalf("logged %q with a pause of %v, want the accept loop's pause of %v", r.Message, retryIn(r), want)
		}
	}
	for _, f := range fillers[1:] {
		f.Close()
	}
	select {
	case conn := <-s.StreamCh():
		conn.Close()
	case <-time.After(30 * time.Second):
		t.Fatal("the connection was not handed on once descriptors were free")
	}
}

// fillDescriptors lowers this process's limit of open files to a few more
// than it has open, and opens files until the limit is reached.
func fillDescriptors(t *testing.T) []*os.File {
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &old); err != nil {
		t.Fatal(err)
	}
	lim := old
	lim.Cur = uint64(len(entries) + 8)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
	var files []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if errors.Is(err, syscall.EMFILE) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if len(files) == 0 {
		t.Fatal("no descriptor was free under the lowered limit")
	}
	return files
}
