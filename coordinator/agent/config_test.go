package agent

import (
	"errors"
	"testing"
	"time"

	"github.com/tpcoord/tpcoord/broadcast/api"
	"github.com/tpcoord/tpcoord/internal/fielderr"
)

func TestDefaultConfigValid(t *testing.T) {
	c := DefaultConfig()
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig: %v", err)
	}
}

// TestValidateNamesTheField: every check reports the field it is about,
// as a *fielderr.Error, for any front end to name its own way.
func TestValidateNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		edit  func(*Config)
		field string
	}{
		{func(c *Config) { c.Job = "a.b" }, "Job"},
		{func(c *Config) { c.Prefix = "" }, "Prefix"},
		{func(c *Config) { c.WorldSize = 0 }, "WorldSize"},
		{func(c *Config) { c.WorldSize, c.Rank = 2, 5 }, "Rank"},
		{func(c *Config) { c.WorldSize, c.Rank = 2, 1 }, "Join"},
		{func(c *Config) { c.NATSServe, c.OnPeerLoss = true, OnPeerLossWait }, "NATSServe"},
		{func(c *Config) { c.Executor = Executor("gpu") }, "Executor"},
		{func(c *Config) { c.EOS = c.Vocab }, "EOS"},
		{func(c *Config) { c.Tokenizer, c.EOS = "tiktoken:cl100k_base", -1 }, "Tokenizer"},
		{func(c *Config) { c.HeartbeatTimeout = c.HeartbeatInterval }, "HeartbeatTimeout"},
		{func(c *Config) { c.StepQueueBytes = 0 }, "StepQueueBytes"},
		{func(c *Config) { c.LivenessGrace = 0 }, "LivenessGrace"},
		{func(c *Config) { c.ClientTimeout = api.KeepaliveInterval }, "ClientTimeout"},
		{func(c *Config) { c.ReplayTimeout = 0 }, "ReplayTimeout"},
		{func(c *Config) { c.OnPeerLoss = OnPeerLoss("retry") }, "OnPeerLoss"},
		{func(c *Config) { c.Sampling = Sampling("greedy") }, "Sampling"},
		{func(c *Config) { c.Noise = Noise("async") }, "Noise"},
		{func(c *Config) { c.SamplingRanks = SamplingRanks("some") }, "SamplingRanks"},
		{func(c *Config) { c.NoisePool.Producers = -2 }, "NoisePool.Producers"},
		{func(c *Config) { c.NoisePool.Step = 0 }, "NoisePool.Step"},
		{func(c *Config) { c.NoisePool.Form = 9 }, "NoisePool.Form"},
		{func(c *Config) { c.Telemetry.FlightSteps = 0 }, "Telemetry.FlightSteps"},
		{func(c *Config) { c.Telemetry.OTLPEndpoint = "ftp://x:1" }, "Telemetry.OTLPEndpoint"},
		{func(c *Config) { c.Executor = ExecutorWorker }, "Worker.Cmd"},
		{func(c *Config) { c.Executor, c.Worker.Cmd, c.Worker.Socket = ExecutorWorker, "x", "y" }, "Worker.Cmd"},
		{func(c *Config) { c.Executor, c.Worker.Cmd, c.Worker.ForwardTimeout = ExecutorWorker, "x", 0 }, "Worker.ForwardTimeout"},
		{func(c *Config) { c.Executor, c.Worker.Cmd, c.Worker.StartTimeout = ExecutorWorker, "x", 0 }, "Worker.StartTimeout"},
		{func(c *Config) { c.Executor, c.Worker.Cmd, c.Worker.DType = ExecutorWorker, "x", "int8" }, "Worker.DType"},
		{func(c *Config) { c.Executor, c.Worker.Cmd = ExecutorWorker, "x 'y" }, "Worker.Cmd"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		var fe *fielderr.Error
		if !errors.As(err, &fe) || fe.Field != tc.field {
			t.Errorf("want an error naming %s, got %v", tc.field, err)
		}
	}
	c := DefaultConfig()
	c.Executor, c.Worker.Cmd, c.Worker.DType, c.Worker.ForwardTimeout = ExecutorWorker, "x", "bf16", time.Second
	if err := c.Validate(); err != nil {
		t.Errorf("a valid worker configuration: %v", err)
	}
	// The pool sizes its producers for the batch the agent runs.
	c = DefaultConfig()
	c.MaxBatch, c.Vocab = 8, 1000
	if err := c.Validate(); err != nil || c.NoisePool.Batch != 8 || c.NoisePool.Vocab != 1000 {
		t.Errorf("noise pool batch %d vocab %d, want 8 and 1000 (%v)", c.NoisePool.Batch, c.NoisePool.Vocab, err)
	}
}

func TestDigest(t *testing.T) {
	a, b := DefaultConfig(), DefaultConfig()
	b.SamplingRanks = SamplingRanksAll
	if a.Digest() == b.Digest() {
		t.Error("SamplingRanks does not change the config digest")
	}
	b = DefaultConfig()
	b.Rank, b.MaxQueue = 3, 7 // a rank's own settings need not agree
	if a.Digest() != b.Digest() {
		t.Error("settings that need not agree change the digest")
	}
	// Whether there is a job key must agree, not where each rank keeps it.
	b.JobKeyFile = "/etc/tpcoord/job.key"
	if a.Digest() == b.Digest() {
		t.Error("a job key does not change the config digest")
	}
	a.JobKeyFile = "/run/credentials/job.key"
	if a.Digest() != b.Digest() {
		t.Error("the job key file's path changes the config digest")
	}
}

// TestTokenizerNeedsALoader: a rank 0 given a tokenizer by a build that
// reads none (the agent-only build) refuses to start, naming the field; a
// follower does not read it.
func TestTokenizerNeedsALoader(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Tokenizer = "tiktoken:cl100k_base"
	var fe *fielderr.Error
	if _, err := New(cfg); !errors.As(err, &fe) || fe.Field != "Tokenizer" {
		t.Fatalf("rank 0 without a loader: %v", err)
	}
	if _, err := New(cfg, WithVocabLoader(func(string) ([][]byte, []bool, error) { return nil, nil, nil })); err != nil {
		t.Fatalf("with a loader: %v", err)
	}
	cfg.WorldSize, cfg.Rank, cfg.Join = 2, 1, []string{"127.0.0.1:1"}
	if _, err := New(cfg); err != nil {
		t.Fatalf("a follower: %v", err)
	}
}
