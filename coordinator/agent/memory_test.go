package agent

import (
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/rank"
	"github.com/tpcoord/tpcoord/rank/core"
)

// TestMemory: the KV cache rank 0 schedules is the worker's, which the
// flags may only lower; without a reported pool the flags model one.
func TestMemory(t *testing.T) {
	worker := rank.KVCapacity{BlockSize: 32, Blocks: 1000, MaxModelLen: 4096}
	for _, tc := range []struct {
		name                  string
		kvBlocks, maxModelLen int
		capacity              rank.KVCapacity
		want                  *core.KVConfig
		wantLen               int
		err                   string
	}{
		{name: "nothing", want: nil},
		{name: "synthetic modelled", kvBlocks: 200, maxModelLen: 512, want: &core.KVConfig{BlockSize: 16, Blocks: 200, Watermark: 2}, wantLen: 512},
		{name: "one block", kvBlocks: 1, want: &core.KVConfig{BlockSize: 16, Blocks: 1, Watermark: 0}},
		{name: "worker's", capacity: worker, want: &core.KVConfig{BlockSize: 32, Blocks: 1000, Watermark: 10}, wantLen: 4096},
		{name: "worker's lowered", capacity: worker, kvBlocks: 300, maxModelLen: 2048, want: &core.KVConfig{BlockSize: 32, Blocks: 300, Watermark: 3}, wantLen: 2048},
		{name: "context only", capacity: rank.KVCapacity{BlockSize: 16, MaxModelLen: 8192}, want: nil, wantLen: 8192},
		{name: "more blocks", capacity: worker, kvBlocks: 1001, err: "--kv-blocks 1001 is more than the worker's KV cache holds (1000 blocks of 32 tokens)"},
		{name: "longer context", capacity: worker, maxModelLen: 4097, err: "User-specified max_model_len (4097) is greater than the derived max_model_len (4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.KVBlocks, cfg.MaxModelLen = tc.kvBlocks, tc.maxModelLen
			kv, maxLen, err := cfg.Memory(tc.capacity)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (kv == nil) != (tc.want == nil) || (kv != nil && *kv != *tc.want) || maxLen != tc.wantLen {
				t.Fatalf("Memory = %+v, %d; want %+v, %d", kv, maxLen, tc.want, tc.wantLen)
			}
		})
	}
}
