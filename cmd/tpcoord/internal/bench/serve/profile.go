package serve

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startProfile starts this process's CPU profile into path ("": none) and
// returns what stops it. The process holds the gateway and both paths'
// clients; a reader tells the paths apart by function (coordinator/gateway
// and net/http for HTTP, rank/client for both).
func startProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}
