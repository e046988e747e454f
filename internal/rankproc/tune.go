package rankproc

import (
	"log/slog"
	"os"
	"runtime"
)

// TuneSelf gives this process (launch, which hosts the job's NATS server,
// or a bench standing in for it) the runtime settings Env gives ranks, for
// a host shared by procs processes. GOMAXPROCS is set in place, unless the
// environment sets it. The sysmon setting only takes effect at start: with
// reexec, and without a schedtrace in GODEBUG already, the process
// re-executes itself (os.Args) once with it added; the caller passes false
// where the process must not be replaced (a test binary) or could not run
// the same way again. TuneSelf returns when no re-execution happened.
func TuneSelf(procs int, reexec bool, log *slog.Logger) {
	if _, ok := os.LookupEnv("GOMAXPROCS"); !ok {
		runtime.GOMAXPROCS(share(procs))
	}
	godebug := os.Getenv("GODEBUG")
	if !reexec || GodebugHas(godebug, "schedtrace") {
		return
	}
	self, err := os.Executable()
	if err == nil {
		env := withoutVar(os.Environ(), "GODEBUG")
		err = execSelf(self, os.Args, append(env, "GODEBUG="+withSysmon(godebug))) // returns only on failure
	}
	log.Warn("running without the sysmon setting: could not re-execute", "err", err)
}
