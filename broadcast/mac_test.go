package broadcast

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"reflect"
	"sync"
	"testing"
)

// fixedKey is a key with known bytes (seed, seed+1, ...), so that the
// sealed bytes can be pinned.
func fixedKey(seed byte) Key {
	k := make(Key, KeySize)
	for i := range k {
		k[i] = seed + byte(i)
	}
	return k
}

var (
	keyedCodec = NewCodec(testJobHash, fixedKey(1))
	otherCodec = NewCodec(testJobHash, fixedKey(2)) // the same job, another key
)

// refMAC is the MAC the protocol specifies for body, computed with the
// standard library alone: zeros without a key.
func refMAC(c *Codec, body []byte) []byte {
	if !c.Keyed() {
		return make([]byte, MACSize)
	}
	h := hmac.New(sha256.New, c.key)
	h.Write(body)
	return h.Sum(nil)[:MACSize]
}

// resealWith recomputes msg's MAC under c and then its CRC, so a test
// that tampers with a field reaches the checks behind both.
func resealWith(c *Codec, msg []byte) []byte {
	c.SealMAC(msg[:len(msg)-checksumLen])
	return reseal(msg)
}

// sealedKinds are one message of each kind, encoded by c.
func sealedKinds(c *Codec) map[string][]byte {
	step := sampleSteps()["one of each"]
	return map[string][]byte{
		"step":           c.AppendStep(nil, step),
		"heartbeat":      c.AppendHeartbeat(nil, sampleHeartbeats()["typical"]),
		"replay request": c.AppendReplayRequest(nil, &ReplayRequest{Epoch: 1, Rank: 2, From: 3, To: 4}),
		"replay reply":   c.AppendReplayReply(nil, &ReplayReply{Epoch: 1, Oldest: 1, Leader: 7, Steps: [][]byte{c.AppendStep(nil, step)}}),
	}
}

// decodeKind decodes msg as the kind sealedKinds names it.
func decodeKind(c *Codec, kind string, msg []byte) error {
	switch kind {
	case "step":
		var s Step
		return c.DecodeStep(msg, &s)
	case "heartbeat":
		var h Heartbeat
		return c.DecodeHeartbeat(msg, &h)
	case "replay request":
		var r ReplayRequest
		return c.DecodeReplayRequest(msg, &r)
	}
	var r ReplayReply
	return c.DecodeReplayReply(msg, &r)
}

// TestKeyedRoundTrip: with a key every kind round-trips, re-encodes to the
// same bytes, and carries the MAC the protocol specifies; without one the
// MAC field is zero.
func TestKeyedRoundTrip(t *testing.T) {
	for _, c := range []*Codec{testCodec, keyedCodec} {
		for kind, msg := range sealedKinds(c) {
			if err := decodeKind(c, kind, msg); err != nil {
				t.Fatalf("keyed %v, %s: %v", c.Keyed(), kind, err)
			}
			n := len(msg) - trailerLen
			if got, want := msg[n:n+MACSize], refMAC(c, msg[:n]); !bytes.Equal(got, want) {
				t.Errorf("keyed %v, %s: MAC %x, want %x", c.Keyed(), kind, got, want)
			}
		}
		for name, want := range sampleSteps() {
			msg := c.AppendStep(nil, want)
			var got Step
			if err := c.DecodeStep(msg, &got); err != nil {
				t.Fatalf("keyed %v, step %s: %v", c.Keyed(), name, err)
			}
			if !reflect.DeepEqual(normalise(&got), normalise(want)) || !bytes.Equal(c.AppendStep(nil, &got), msg) {
				t.Fatalf("keyed %v, step %s: round trip differs", c.Keyed(), name)
			}
			if _, _, err := c.PeekStep(msg); err != nil {
				t.Fatalf("keyed %v, step %s: PeekStep: %v", c.Keyed(), name, err)
			}
		}
		for name, want := range sampleHeartbeats() {
			var got Heartbeat
			if err := c.DecodeHeartbeat(c.AppendHeartbeat(nil, want), &got); err != nil || got != *want {
				t.Fatalf("keyed %v, heartbeat %s: %+v, %v", c.Keyed(), name, got, err)
			}
		}
	}
}

// TestMACRefused: a keyed receiver refuses, with ErrMAC, a message whose
// MAC has a flipped bit, one sealed with another key, one sealed without
// a key, and one whose body was changed after sealing: each with a valid
// checksum, which is all a forger without the key can compute. PeekStep
// refuses the steps too.
func TestMACRefused(t *testing.T) {
	own, other, keyless := sealedKinds(keyedCodec), sealedKinds(otherCodec), sealedKinds(testCodec)
	for kind, msg := range own {
		n := len(msg) - trailerLen
		for name, bad := range map[string][]byte{
			"MAC bit flipped": func() []byte {
				b := bytes.Clone(msg)
				b[n+5] ^= 0x10
				return reseal(b)
			}(),
			"another key":    other[kind],
			"no key":         keyless[kind],
			"body changed":   func() []byte { b := bytes.Clone(msg); b[17] ^= 1; return reseal(b) }(),
			"keyless reseal": resealWith(testCodec, func() []byte { b := bytes.Clone(msg); b[17] ^= 1; return b }()),
		} {
			if err := decodeKind(keyedCodec, kind, bad); !errors.Is(err, ErrMAC) {
				t.Errorf("%s, %s: err = %v, want ErrMAC", kind, name, err)
			}
			if kind != "step" {
				continue
			}
			if _, _, err := keyedCodec.PeekStep(bad); !errors.Is(err, ErrMAC) {
				t.Errorf("PeekStep, %s: err = %v, want ErrMAC", name, err)
			}
		}
		// Corruption is still a checksum error, and another job's message
		// says so, before any MAC is computed.
		b := bytes.Clone(msg)
		b[n+1] ^= 1
		if err := decodeKind(keyedCodec, kind, b); !errors.Is(err, ErrChecksum) {
			t.Errorf("%s, MAC corrupted in transit: err = %v, want ErrChecksum", kind, err)
		}
		if err := decodeKind(NewCodec(testJobHash+1, fixedKey(1)), kind, msg); !errors.Is(err, ErrJob) {
			t.Errorf("%s, another job: err = %v, want ErrJob", kind, err)
		}
	}
	// A receiver without a key does not check the MAC (the job has none).
	for kind, msg := range own {
		if err := decodeKind(testCodec, kind, msg); err != nil {
			t.Errorf("%s sealed with a key, to a receiver without one: %v", kind, err)
		}
	}
}

// TestMACCoversReplayedSteps: a replay reply sealed with the job's key
// that carries a step sealed with another key passes as a reply, but the
// step inside is refused when decoded.
func TestMACCoversReplayedSteps(t *testing.T) {
	forged := otherCodec.AppendStep(nil, &Step{Epoch: 1, Step: 2})
	msg := keyedCodec.AppendReplayReply(nil, &ReplayReply{Epoch: 1, Oldest: 1, Steps: [][]byte{forged}})
	var rep ReplayReply
	if err := keyedCodec.DecodeReplayReply(msg, &rep); err != nil {
		t.Fatal(err)
	}
	var st Step
	if err := keyedCodec.DecodeStep(rep.Steps[0], &st); !errors.Is(err, ErrMAC) {
		t.Fatalf("replayed step sealed with another key: err = %v, want ErrMAC", err)
	}
}

// TestKeyedStructureChecks: with a key, a message resealed with the right
// MAC reaches the same structural checks as without one.
func TestKeyedStructureChecks(t *testing.T) {
	msg := keyedCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1})
	binary.LittleEndian.PutUint32(msg[28:], MaxTokens+1)
	var s Step
	if err := keyedCodec.DecodeStep(reseal(msg), &s); !errors.Is(err, ErrMAC) {
		t.Fatalf("count changed, checksum resealed, MAC not: err = %v, want ErrMAC", err)
	}
	if err := keyedCodec.DecodeStep(resealWith(keyedCodec, msg), &s); !errors.Is(err, ErrBounds) {
		t.Fatalf("count changed, resealed: err = %v, want ErrBounds", err)
	}
	hb := keyedCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"])
	hb[25] = 1
	var h Heartbeat
	if err := keyedCodec.DecodeHeartbeat(resealWith(keyedCodec, hb), &h); !errors.Is(err, ErrVersion) {
		t.Fatalf("reserved byte set, resealed: err = %v, want ErrVersion", err)
	}
}

// TestMACBytesPinned pins whole sealed messages under a fixed key: every
// field little-endian and the MAC over those bytes, the same on any host
// (the s390x run of this test checks big-endian).
func TestMACBytesPinned(t *testing.T) {
	hb := keyedCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"])
	step := keyedCodec.AppendStep(nil, &Step{
		Epoch: 1, Leader: 0x5eed1e55, Step: 2, Tokens: []Token{{Seq: 1, Token: 42}}, Removed: []uint64{1},
		Grants: []Grant{{Seq: 2, Blocks: []uint32{7, 9}}}, Chunks: []Chunk{{Seq: 2, Fed: 3}}, Hits: []Hit{{Seq: 2, Tokens: 4}},
	})
	for _, tc := range []struct {
		name string
		msg  []byte
		want string
	}{
		{"heartbeat", hb, pinnedHeartbeat},
		{"step", step, pinnedStep},
	} {
		if got := hex.EncodeToString(tc.msg); got != tc.want {
			t.Errorf("%s sealed under the fixed key:\n got  %s\n want %s", tc.name, got, tc.want)
		}
	}
}

const (
	pinnedHeartbeat = "5450434804000000864609208018c3f2020000000300000002000000d2040000000000000df0fecaefbeadde00002a36fe9c9717551eed5e" +
		"100000008813000000800000" + // KV: block size 16, 5000 blocks, max model len 32768
		"541fa4e45acd15669761d27a59213c25" + "7ac4ade8"
	pinnedStep = "5450435304000000864609208018c3f2010000000200000000000000010000000100000000000000551eed5e0100000001000000" +
		"01000000" + // H: one hit, at offset 52
		"01000000000000002a000000" + "0100000000000000" + // the token, the removal
		"0200000000000000" + "02000000" + "0700000009000000" + // the grant: sequence 2, 2 blocks, 7 and 9
		"0200000000000000" + "03000000" + // the chunk: sequence 2, fed 3
		"0200000000000000" + "04000000" + // the hit: sequence 2, 4 tokens cached
		"0adc788c2b8fa07e631442c9573e00f2" + "9d8d1a92"
)

// TestCodecNoAllocs: sealing and verifying reuse their HMAC states, so
// encoding into a reused buffer and decoding into a warmed value allocate
// nothing, with a key or without.
func TestCodecNoAllocs(t *testing.T) {
	st := benchStep()
	hb := sampleHeartbeats()["typical"]
	for _, c := range []*Codec{testCodec, keyedCodec} {
		buf := c.AppendStep(nil, st)
		var got Step
		var h Heartbeat
		if err := c.DecodeStep(buf, &got); err != nil {
			t.Fatal(err)
		}
		hbuf := c.AppendHeartbeat(nil, hb)
		for name, f := range map[string]func(){
			"AppendStep": func() { buf = c.AppendStep(buf[:0], st) },
			"DecodeStep": func() {
				if err := c.DecodeStep(buf, &got); err != nil {
					t.Fatal(err)
				}
			},
			"PeekStep": func() {
				if _, _, err := c.PeekStep(buf); err != nil {
					t.Fatal(err)
				}
			},
			"AppendHeartbeat": func() { hbuf = c.AppendHeartbeat(hbuf[:0], hb) },
			"DecodeHeartbeat": func() {
				if err := c.DecodeHeartbeat(hbuf, &h); err != nil {
					t.Fatal(err)
				}
			},
		} {
			if allocs := testing.AllocsPerRun(100, f); allocs != 0 {
				t.Errorf("keyed %v: %s allocated %v times per call, want 0", c.Keyed(), name, allocs)
			}
		}
	}
}

// TestCodecConcurrent seals and verifies from several goroutines at once,
// as a rank's subscription handlers and loops do (run with -race).
func TestCodecConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var h Heartbeat
			for i := range 200 {
				want := Heartbeat{Rank: uint32(g), Applied: uint64(i)}
				msg := keyedCodec.AppendHeartbeat(nil, &want)
				if err := keyedCodec.DecodeHeartbeat(msg, &h); err != nil || h != want {
					t.Errorf("goroutine %d, heartbeat %d: %+v, %v", g, i, h, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// benchStep is a typical decode step: a batch of 32 rows, one token each,
// nothing removed or admitted.
func benchStep() *Step {
	st := &Step{Epoch: 1, Leader: 0x5eed1e55, Step: 1000}
	for i := range 32 {
		st.Tokens = append(st.Tokens, Token{Seq: uint64(i + 1), Token: int32(1000 + i)})
	}
	return st
}

// BenchmarkStep encodes and decodes a typical step (batch 32), with and
// without a key: the difference is what sealing and verifying cost.
func BenchmarkStep(b *testing.B) {
	st := benchStep()
	for _, c := range []*Codec{testCodec, keyedCodec} {
		b.Run(map[bool]string{false: "nokey", true: "key"}[c.Keyed()], func(b *testing.B) {
			buf := c.AppendStep(nil, st)
			var got Step
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				buf = c.AppendStep(buf[:0], st)
				if err := c.DecodeStep(buf, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkHeartbeat is BenchmarkStep for a heartbeat.
func BenchmarkHeartbeat(b *testing.B) {
	hb := sampleHeartbeats()["typical"]
	for _, c := range []*Codec{testCodec, keyedCodec} {
		b.Run(map[bool]string{false: "nokey", true: "key"}[c.Keyed()], func(b *testing.B) {
			buf := c.AppendHeartbeat(nil, hb)
			var got Heartbeat
			b.ReportAllocs()
			for b.Loop() {
				buf = c.AppendHeartbeat(buf[:0], hb)
				if err := c.DecodeHeartbeat(buf, &got); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkMAC is sealing alone and verifying alone, for the bodies of a
// typical step and of a heartbeat.
func BenchmarkMAC(b *testing.B) {
	for _, tc := range []struct {
		name string
		msg  []byte
	}{
		{"step32", keyedCodec.AppendStep(nil, benchStep())},
		{"heartbeat", keyedCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"])},
	} {
		body := tc.msg[:len(tc.msg)-checksumLen]
		b.Run(tc.name+"/seal", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				keyedCodec.SealMAC(body)
			}
		})
		b.Run(tc.name+"/verify", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := keyedCodec.VerifyMAC(body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
