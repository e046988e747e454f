//go:build !(amd64 || s390x || ppc64le) || purego

package blockmax

// Best is the fastest kernel this machine runs.
var Best = &Go

// Impls lists every kernel this machine runs, for the equivalence tests.
var Impls = []*Kernel{&Go}
