//go:build !agentonly

package main

import "github.com/spf13/cobra"

// The full build: every command.
const (
	programName  = "tpcoord"
	programShort = "Tensor-parallel decode coordinator: one agent per card, rank 0 samples, NATS keeps ranks in lockstep"
)

func addCommands(root *cobra.Command) {
	bench := &cobra.Command{Use: "bench", Short: "Benchmarks (JSON lines with the machine, the configuration and medians)"}
	bench.AddCommand(newBenchSamplerCmd(), newBenchBroadcastCmd(), newBenchBroadcastPublisherCmd(), newBenchBroadcastServerCmd(), newBenchBroadcastFollowerCmd(), newBenchE2ECmd())
	bench.AddCommand(newBenchNoiseCmd(), newBenchStepCmd(), newBenchServeCmd(), newBenchLaunchCmd(), newBenchPrefixCmd(), newBenchStructuredCmd())
	root.AddCommand(newAgentCmd(), newLaunchCmd(), newServeModelCmd(), newGenerateCmd(), newStatusCmd(), newSampleCmd(), bench, newWorkerCmd(), newServeCmd(), newVersionCmd())
}
