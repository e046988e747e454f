//go:build agentonly

package main

import "github.com/tpcoord/tpcoord/coordinator/agent"

// vocabLoader is nil in the agent-only build, which has no tokenizers: an
// agent given --tokenizer refuses to start (launch runs its rank 0 from
// the full build).
var vocabLoader agent.VocabLoader
