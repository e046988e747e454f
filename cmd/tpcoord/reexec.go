//go:build !agentonly

package main

// reexec lets launch re-execute itself to give itself the sysmon setting
// (rankproc.TuneSelf). A test binary clears it (selfexec_test.go): it must
// not be replaced, whether it runs the tests or stands in for tpcoord.
var reexec = true
