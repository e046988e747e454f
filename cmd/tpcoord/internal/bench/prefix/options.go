package prefix

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tpcoord/tpcoord/rank/worker"
)

// blockSize is launch's default KV block size, which the bench leaves as
// it is: the synthetic worker's pool is sized in its blocks.
const blockSize = 16

// Options are the bench's flags.
type Options struct {
	Self string // the tpcoord binary: launch, and the synthetic worker
	// NProc is the ranks (--nproc).
	NProc int
	// WorkerCmd is each rank's model worker (--worker-cmd; {socket},
	// {rank}); empty runs `tpcoord worker` (the synthetic model) with a
	// pool of KVBlocks blocks and ForwardTime per forward pass.
	WorkerCmd   string
	KVBlocks    int           // --kv-blocks: the synthetic worker's pool
	ForwardTime time.Duration // --forward-time: the synthetic worker's forward pass
	Vocab       int           // --vocab: the model's vocabulary
	EOS         int           // --eos: the model's EOS token (-1: none)
	// The TTFT workload: Requests requests one after another, each a
	// shared PrefixTokens-token prefix and a SuffixTokens-token suffix of
	// its own, MaxTokens output tokens.
	PrefixTokens int
	SuffixTokens int
	Requests     int
	MaxTokens    int
	// The chat workload: Chats concurrent conversations of Turns turns,
	// each turn the whole history and a new TurnTokens-token user
	// message, answered with AnswerTokens tokens.
	Chats          int
	Turns          int
	TurnTokens     int
	AnswerTokens   int
	Rounds         int           // --rounds: one job with caching and one without per round
	ForwardTimeout time.Duration // --forward-timeout: one worker step's deadline
	JSON           bool          // --json: JSON lines instead of a table
	Timeout        time.Duration // --timeout: the whole run
}

// Validate checks o; its errors name the flag.
func (o Options) Validate() error {
	if err := o.validateWorkloads(); err != nil {
		return err
	}
	switch {
	case o.NProc < 1 || o.NProc > 64:
		return fmt.Errorf("--nproc: must be in [1, 64], got %d", o.NProc)
	case o.Rounds < 1 || o.Rounds > 100:
		return fmt.Errorf("--rounds: must be in [1, 100], got %d", o.Rounds)
	case o.Vocab < 64 || o.Vocab > 1<<24:
		return fmt.Errorf("--vocab: must be in [64, %d], got %d", 1<<24, o.Vocab)
	case o.EOS < -1 || o.EOS >= o.Vocab:
		return fmt.Errorf("--eos: must be -1 (none) or a token below --vocab %d, got %d", o.Vocab, o.EOS)
	case o.ForwardTime < 0:
		return fmt.Errorf("--forward-time: must be >= 0, got %v", o.ForwardTime)
	case o.ForwardTimeout <= 0:
		return fmt.Errorf("--forward-timeout: must be > 0, got %v", o.ForwardTimeout)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout: must be > 0, got %v", o.Timeout)
	case o.Self == "":
		return errors.New("options: Self, the tpcoord binary to run launch from, is not set")
	}
	if o.WorkerCmd != "" {
		if _, err := worker.SplitCommand(o.WorkerCmd); err != nil {
			return fmt.Errorf("--worker-cmd: %w", err)
		}
		return nil
	}
	if need := o.blocksNeeded(); o.KVBlocks < need {
		return fmt.Errorf("--kv-blocks: the workloads need at least %d blocks of %d tokens, got %d", need, blockSize, o.KVBlocks)
	}
	return nil
}

// validateWorkloads checks the two workloads' sizes.
func (o Options) validateWorkloads() error {
	const most = 1 << 20
	for _, f := range []struct {
		name  string
		v, lo int
	}{
		{"prefix-tokens", o.PrefixTokens, 1}, {"suffix-tokens", o.SuffixTokens, 1},
		{"requests", o.Requests, 2}, {"max-tokens", o.MaxTokens, 1},
		{"chats", o.Chats, 0}, {"turns", o.Turns, 1},
		{"turn-tokens", o.TurnTokens, 1}, {"answer-tokens", o.AnswerTokens, 1},
	} {
		if f.v < f.lo || f.v > most {
			return fmt.Errorf("--%s: must be in [%d, %d], got %d", f.name, f.lo, most, f.v)
		}
	}
	return nil
}

// ttftLen is the most tokens a request of the TTFT workload holds.
func (o Options) ttftLen() int { return o.PrefixTokens + o.SuffixTokens + o.MaxTokens }

// chatLen is the most tokens a request of the chat workload holds: the
// last turn's history, its message and its answer.
func (o Options) chatLen() int { return o.Turns * (o.TurnTokens + o.AnswerTokens) }

// blocksNeeded is the smallest pool that holds either workload at once
// without preemption: one TTFT request, or every conversation's last turn.
func (o Options) blocksNeeded() int {
	blocks := func(tokens int) int { return (tokens + blockSize - 1) / blockSize }
	return max(blocks(o.ttftLen()), o.Chats*blocks(o.chatLen()))
}

// maxBatch is launch's --max-batch: every conversation at once.
func (o Options) maxBatch() int { return max(8, o.Chats) }

// workerCmd is the model worker command launch runs: o.WorkerCmd, or the
// synthetic `tpcoord worker` with its pool.
func (o Options) workerCmd() string {
	if o.WorkerCmd != "" {
		return o.WorkerCmd
	}
	self := o.Self
	if strings.ContainsAny(self, " \t'\"\\") {
		self = "'" + strings.ReplaceAll(self, "'", `'\''`) + "'"
	}
	return fmt.Sprintf("%s worker --socket {socket} --kv-blocks %d --block-size %d --forward-time %v --log-level warn",
		self, o.KVBlocks, blockSize, o.ForwardTime)
}

// launchArgs are launch's flags for a job of round r, with prefix caching
// or without. The heartbeat and client timeouts are generous: a model
// worker's prefill keeps both cores of a small shared host busy for
// seconds, which can hold a rank's heartbeat or this client's keepalive
// past launch's defaults (1 s, 2 s), and the bench measures the cache,
// not failure detection.
func (o Options) launchArgs(r int, caching bool) []string {
	args := []string{
		"--heartbeat-timeout", "10s", "--client-timeout", "10s",
		"--nproc", strconv.Itoa(o.NProc), "--job", fmt.Sprintf("bench-prefix-%d-%s", r, modeName(caching)),
		"--vocab", strconv.Itoa(o.Vocab), "--eos", strconv.Itoa(o.EOS), "--max-batch", strconv.Itoa(o.maxBatch()),
		"--noise", "inline", "--executor", "worker", "--worker-cmd", o.workerCmd(),
		"--forward-timeout", o.ForwardTimeout.String(),
	}
	if !caching {
		args = append(args, "--enable-prefix-caching=false")
	}
	return args
}

// Mode names, as the lines carry them.
const (
	ModeOn  = "on"
	ModeOff = "off"
)

func modeName(caching bool) string {
	if caching {
		return ModeOn
	}
	return ModeOff
}
