package rankproc

import (
	"bytes"
	"io"
	"os"
	"strings"
)

// CauseFileEnv names the file a rank writes the error it exits with to,
// for the launch that started it: launch reports that error once, as the
// cause of the rank's death, and the rank does not print it as well.
const CauseFileEnv = "TPCOORD_CAUSE_FILE"

// causeMax bounds the cause read back.
const causeMax = 4096

// WriteCause writes err's text to path (mode 0600); it reports whether
// it did ("" path: no).
func WriteCause(path string, err error) bool {
	if path == "" || err == nil {
		return false
	}
	return os.WriteFile(path, []byte(err.Error()+"\n"), 0o600) == nil
}

// ReadCause is the error a rank wrote to path, its lines joined by "; "
// ("" if it wrote none).
func ReadCause(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, causeMax))
	if err != nil {
		return ""
	}
	var lines []string
	for _, l := range bytes.Split(data, []byte("\n")) {
		if l = bytes.TrimSpace(l); len(l) > 0 {
			lines = append(lines, string(l))
		}
	}
	return strings.Join(lines, "; ")
}
