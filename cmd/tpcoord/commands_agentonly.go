//go:build agentonly

package main

import "github.com/spf13/cobra"

// The agent-only build (go build -tags agentonly, installed as
// tpcoord-agent): the agent and version commands, without the gateway, the
// tokenizers, the clients, the benchmarks and (broadcast/natsbus) the
// embedded NATS server. Its file is less than half the size, and a process
// of it starts on about two thirds of the CPU time of the full binary's,
// which launch's ranks pay once each (docs/benchmarks.md, "launch"). launch starts it for its ranks when it is
// installed beside tpcoord (launch.AgentBinary).
const (
	programName  = "tpcoord-agent"
	programShort = "The tpcoord agent alone: one TP rank (tpcoord-agent agent ...), as 'tpcoord agent' runs it"
)

func addCommands(root *cobra.Command) {
	root.AddCommand(newAgentCmd(), newVersionCmd())
}
