// Package k8stest tests tpcoord's Kubernetes base (configs/k8s) offline.
// A module of its own, so that kustomize and the Kubernetes API types stay
// out of tpcoord's go.mod; scripts/test.sh runs its tests
// (go -C scripts/k8stest test ./...).
//
// TestRenderStrict renders the base with kustomize's Go API (what
// kubectl kustomize runs) and decodes every object strictly into its
// k8s.io/api type: a field the type lacks is an error. TestBaseShape checks
// what the base promises beyond decoding. TestBaseRunsLocally runs the
// rendered pods' containers (init containers first, to their end) as local
// processes, for every ordinal of each StatefulSet, with their rendered
// commands, arguments and environments, and only these substitutions for
// what a cluster provides:
//
//   - programs: the tpcoord image's /usr/bin/tpcoord is the binary
//     scripts/package.sh --binary builds (the image's own build); the
//     official NATS image's /nats-server is Debian's nats-server; busybox's
//     sh is /bin/sh;
//   - the pod network: every pod is 127.0.0.1, each of its container ports
//     a free local port of its own; in a setting, HOST:PORT where HOST is
//     0.0.0.0 (the pod itself), a Service's name (its first pod) or
//     POD.SERVICE of a headless Service becomes 127.0.0.1:LOCALPORT;
//   - volumes: a mount path in a setting becomes a directory of the pod's
//     (an emptyDir, shared by the pod's containers) or of its Secret, whose
//     keys the test writes as files with the volume's defaultMode;
//   - the downward API: the pod-index label is the ordinal, metadata.name
//     the pod's name;
//   - the environment holds the container's variables and PATH only.
//
// The Secrets are the test's, made as docs/operations.md tells a reader
// to make them: random keys and passwords, configs/nats/nats-server.conf
// with its passwords replaced (and its listen address the NATS pod's local
// one), API keys and a self-signed certificate for the gateway.
package k8stest
