package stats

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
)

// Machine is the machine a benchmark ran on; every result line embeds it
// (its fields appear where the Machine is embedded).
type Machine struct {
	CPU   string `json:"cpu"` // CPUModel
	Cores int    `json:"cores"`
	Go    string `json:"go"`
}

// ThisMachine describes the machine this process runs on.
func ThisMachine() Machine {
	return Machine{CPU: CPUModel(), Cores: runtime.NumCPU(), Go: runtime.Version()}
}

// CPUModel reads the CPU model name from /proc/cpuinfo, or returns GOARCH.
func CPUModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return runtime.GOARCH
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v) + " (" + runtime.GOARCH + ")"
		}
	}
	return runtime.GOARCH
}

// LoadAvg is /proc/loadavg's 1, 5 and 15 minute averages ("" if
// unknown): how busy the shared host was around a run.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// HasAVX512F says whether /proc/cpuinfo lists the avx512f flag.
func HasAVX512F() bool {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			return strings.Contains(" "+strings.TrimSpace(v)+" ", " avx512f ")
		}
	}
	return false
}

// WriteJSONLine writes v as one line of JSON.
func WriteJSONLine(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
