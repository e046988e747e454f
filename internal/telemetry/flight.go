package telemetry

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// flightDumper writes the flight recorder to the log and, with a
// directory, to a file there.
type flightDumper struct {
	fr    FlightRecorder // nil: nothing to dump
	label string
	dir   string
	log   *slog.Logger
	now   func() time.Time

	mu sync.Mutex // one dump at a time, so files get distinct names
}

// dump writes one dump; why says what triggered it.
func (f *flightDumper) dump(why string) {
	if f.fr == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	var b bytes.Buffer
	_ = f.fr.Dump(&b, f.label, now)
	attrs := []any{"reason", why, "dump", b.String()}
	if f.dir != "" {
		if name, err := f.write(now, b.Bytes()); err != nil {
			f.log.Error("flight recorder: cannot write dump", "dir", f.dir, "err", err)
		} else {
			attrs = append(attrs, "file", name)
		}
	}
	f.log.Warn("flight recorder dump", attrs...)
}

func (f *flightDumper) write(now time.Time, data []byte) (string, error) {
	name := filepath.Join(f.dir, fmt.Sprintf("flight-%s-%s.txt", strings.ReplaceAll(f.label, " ", "-"), now.UTC().Format("20060102T150405.000000000")))
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return "", err
	}
	return name, os.WriteFile(name, data, 0o644)
}
