package broadcast

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"reflect"
	"runtime"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testJob = "job-a"

var (
	testJobHash = JobHash(testJob)
	testCodec   = NewCodec(testJobHash, nil)
)

// reseal recomputes the trailing CRC-32C (Castagnoli) of msg over its body,
// so a test that tampers with a field reaches the check behind the
// checksum.
func reseal(msg []byte) []byte {
	body := msg[:len(msg)-checksumLen]
	binary.LittleEndian.PutUint32(msg[len(msg)-checksumLen:], crc32.Checksum(body, crc32.MakeTable(crc32.Castagnoli)))
	return msg
}

// sampleSteps covers the shapes a step takes: empty, every section filled,
// NoToken (-1) and extreme values.
func sampleSteps() map[string]*Step {
	many := &Step{Epoch: 3, Leader: 0xdeadbeef, Step: 1000}
	for i := range 300 {
		many.Tokens = append(many.Tokens, Token{Seq: uint64(i + 1), Token: int32(i * 7)})
	}
	for i := range 40 {
		many.Removed = append(many.Removed, uint64(1000+i))
	}
	for i := range 25 {
		p := make([]int32, i+1)
		for j := range p {
			p[j] = int32(i*100 + j)
		}
		many.Admitted = append(many.Admitted, Admission{Seq: uint64(2000 + i), Prompt: p})
		many.Grants = append(many.Grants, Grant{Seq: uint64(2000 + i), Blocks: []uint32{uint32(3 * i), uint32(3*i + 1)}[:1+i%2]})
	}
	many.Chunks = []Chunk{{Seq: 2024, Fed: 16}}
	for i := range 10 {
		many.Hits = append(many.Hits, Hit{Seq: uint64(2000 + 2*i), Tokens: uint32(16 * (i + 1))})
	}
	return map[string]*Step{
		"empty": {Epoch: 0, Step: 1},
		"one of each": {
			Epoch: 1, Step: 2,
			Tokens:   []Token{{Seq: 1, Token: 42}},
			Removed:  []uint64{1},
			Admitted: []Admission{{Seq: 2, Prompt: []int32{5, 6, 7}}, {Seq: 3, Prompt: []int32{8}, Output: []int32{9, 10}}},
			Grants:   []Grant{{Seq: 2, Blocks: []uint32{4}}},
			Chunks:   []Chunk{{Seq: 3, Fed: 2}},
			Hits:     []Hit{{Seq: 3, Tokens: 1}},
		},
		"hits only":      {Epoch: 2, Step: 3, Hits: []Hit{{Seq: 1, Tokens: 16}, {Seq: 2, Tokens: 32}}},
		"many":           many,
		"negative token": {Epoch: 1, Step: 9, Tokens: []Token{{Seq: 4, Token: -1}, {Seq: 5, Token: math.MinInt32}}},
		"max values": {
			Epoch: math.MaxUint32, Leader: math.MaxUint32, Step: math.MaxUint64,
			Tokens:   []Token{{Seq: math.MaxUint64, Token: math.MaxInt32}},
			Removed:  []uint64{math.MaxUint64},
			Admitted: []Admission{{Seq: math.MaxUint64 - 1, Prompt: []int32{math.MaxInt32, math.MinInt32, -1, 0}}},
			Grants:   []Grant{{Seq: math.MaxUint64 - 1, Blocks: []uint32{math.MaxUint32, 0}}},
			Chunks:   []Chunk{{Seq: math.MaxUint64 - 1, Fed: math.MaxUint32}},
			Hits:     []Hit{{Seq: math.MaxUint64 - 1, Tokens: math.MaxUint32}},
		},
	}
}

// normalise makes decoded and original steps comparable: the decoder
// allocates empty (non-nil) prompts.
func normalise(s *Step) *Step {
	c := *s
	if len(c.Tokens) == 0 {
		c.Tokens = nil
	}
	if len(c.Removed) == 0 {
		c.Removed = nil
	}
	if len(c.Admitted) == 0 {
		c.Admitted = nil
	}
	if len(c.Grants) == 0 {
		c.Grants = nil
	}
	if len(c.Chunks) == 0 {
		c.Chunks = nil
	}
	if len(c.Hits) == 0 {
		c.Hits = nil
	}
	c.Admitted = append([]Admission(nil), c.Admitted...)
	for i := range c.Admitted {
		if len(c.Admitted[i].Prompt) == 0 {
			c.Admitted[i].Prompt = nil
		}
	}
	return &c
}

func TestStepRoundTrip(t *testing.T) {
	for name, want := range sampleSteps() {
		t.Run(name, func(t *testing.T) {
			prefix := []byte("prefix")
			msg := testCodec.AppendStep(append([]byte(nil), prefix...), want)
			if !bytes.HasPrefix(msg, prefix) {
				t.Fatalf("AppendStep clobbered dst's existing bytes")
			}
			msg = msg[len(prefix):]
			want := normalise(want)
			if n := StepSize(want); len(msg) != n {
				t.Fatalf("encoding is %d bytes, StepSize says %d", len(msg), n)
			}
			var got Step
			if err := testCodec.DecodeStep(msg, &got); err != nil {
				t.Fatalf("DecodeStep: %v", err)
			}
			if g := normalise(&got); !reflect.DeepEqual(g, want) {
				t.Fatalf("round trip mismatch:\n got  %+v\n want %+v", g, want)
			}
			if again := testCodec.AppendStep(nil, &got); !bytes.Equal(again, msg) {
				t.Fatalf("re-encoding differs from the original encoding")
			}
		})
	}
}

func TestStepEmptyPromptRoundTrip(t *testing.T) {
	want := &Step{Epoch: 1, Step: 1, Admitted: []Admission{{Seq: 7}}}
	msg := testCodec.AppendStep(nil, want)
	var got Step
	if err := testCodec.DecodeStep(msg, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Admitted) != 1 || got.Admitted[0].Seq != 7 || len(got.Admitted[0].Prompt) != 0 {
		t.Fatalf("got %+v", got)
	}
}

func sampleHeartbeats() map[string]*Heartbeat {
	return map[string]*Heartbeat{
		"zero": {},
		"typical": {
			Epoch: 2, Rank: 3, Phase: PhaseRunning, Applied: 1234, Digest: 0xdeadbeefcafef00d, UnixNs: 1_700_000_000_000_000_000, Leader: 0x5eed1e55,
			KV: KVCapacity{BlockSize: 16, Blocks: 5000, MaxModelLen: 32768},
		},
		"max": {
			Epoch: math.MaxUint32, Rank: math.MaxUint32, Phase: 255, Applied: math.MaxUint64, Digest: math.MaxUint64, UnixNs: math.MaxInt64, Leader: math.MaxUint32,
			KV: KVCapacity{BlockSize: math.MaxUint32, Blocks: math.MaxUint32, MaxModelLen: math.MaxUint32},
		},
		"negative clock": {
			Phase: PhaseAborted, UnixNs: math.MinInt64,
		},
	}
}

func TestHeartbeatRoundTrip(t *testing.T) {
	for name, want := range sampleHeartbeats() {
		t.Run(name, func(t *testing.T) {
			msg := testCodec.AppendHeartbeat(nil, want)
			if len(msg) != heartbeatLen {
				t.Fatalf("heartbeat is %d bytes, want %d", len(msg), heartbeatLen)
			}
			var got Heartbeat
			if err := testCodec.DecodeHeartbeat(msg, &got); err != nil {
				t.Fatalf("DecodeHeartbeat: %v", err)
			}
			if got != *want {
				t.Fatalf("got %+v, want %+v", got, *want)
			}
		})
	}
}

func TestPhaseString(t *testing.T) {
	for _, tc := range []struct {
		p    Phase
		want string
	}{
		{PhaseJoining, "joining"}, {PhaseReady, "ready"}, {PhaseRunning, "running"},
		{PhaseStopping, "stopping"}, {PhaseAborted, "aborted"}, {Phase(9), "phase(9)"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("Phase(%d).String() = %q, want %q", tc.p, got, tc.want)
		}
	}
}

func TestStepTruncated(t *testing.T) {
	for name, s := range sampleSteps() {
		msg := testCodec.AppendStep(nil, s)
		for n := range len(msg) {
			var got Step
			err := testCodec.DecodeStep(msg[:n], &got)
			if err == nil {
				t.Fatalf("%s: decoding the first %d of %d bytes succeeded", name, n, len(msg))
			}
		}
	}
}

func TestHeartbeatTruncated(t *testing.T) {
	msg := testCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"])
	for n := range len(msg) {
		var got Heartbeat
		if err := testCodec.DecodeHeartbeat(msg[:n], &got); err == nil {
			t.Fatalf("decoding the first %d of %d bytes succeeded", n, len(msg))
		}
	}
}

// TestTruncatedResealed cuts a valid step short and reseals it, so the
// decoder's length checks (not the checksum) must catch it.
func TestStepTruncatedResealed(t *testing.T) {
	msg := testCodec.AppendStep(nil, sampleSteps()["one of each"])
	for n := 16 + checksumLen; n < len(msg); n++ {
		cut := reseal(append(append([]byte(nil), msg[:n-checksumLen]...), 0, 0, 0, 0))
		var got Step
		err := testCodec.DecodeStep(cut, &got)
		if !errors.Is(err, ErrShort) {
			t.Fatalf("length %d: err = %v, want ErrShort", n, err)
		}
	}
}

func TestStepBitFlips(t *testing.T) {
	msg := testCodec.AppendStep(nil, sampleSteps()["one of each"])
	for i := range len(msg) * 8 {
		bad := append([]byte(nil), msg...)
		bad[i/8] ^= 1 << (i % 8)
		var got Step
		if err := testCodec.DecodeStep(bad, &got); err == nil {
			t.Fatalf("flipping bit %d of byte %d went unnoticed", i%8, i/8)
		}
	}
	// Past the magic and version every flip is the checksum's to catch.
	for i := 5 * 8; i < len(msg)*8; i++ {
		bad := append([]byte(nil), msg...)
		bad[i/8] ^= 1 << (i % 8)
		var got Step
		if err := testCodec.DecodeStep(bad, &got); !errors.Is(err, ErrChecksum) {
			t.Fatalf("flipping bit %d of byte %d: err = %v, want ErrChecksum", i%8, i/8, err)
		}
	}
}

func TestHeartbeatBitFlips(t *testing.T) {
	msg := testCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"])
	for i := range len(msg) * 8 {
		bad := append([]byte(nil), msg...)
		bad[i/8] ^= 1 << (i % 8)
		var got Heartbeat
		if err := testCodec.DecodeHeartbeat(bad, &got); err == nil {
			t.Fatalf("flipping bit %d of byte %d went unnoticed", i%8, i/8)
		}
	}
}

// TestHeaderErrors tampers with the header fields, resealing so that each
// check is reached, and expects the matching sentinel from both decoders.
func TestHeaderErrors(t *testing.T) {
	step := func() []byte { return testCodec.AppendStep(nil, sampleSteps()["one of each"]) }
	hb := func() []byte { return testCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"]) }
	decodeStep := func(b []byte) error { var s Step; return testCodec.DecodeStep(b, &s) }
	decodeHB := func(b []byte) error { var h Heartbeat; return testCodec.DecodeHeartbeat(b, &h) }
	for _, tc := range []struct {
		name   string
		tamper func([]byte) []byte
		want   error
	}{
		{"wrong job", func(b []byte) []byte { binary.LittleEndian.PutUint64(b[8:], JobHash("job-b")); return reseal(b) }, ErrJob},
		{"wrong version", func(b []byte) []byte { b[4] = Version + 1; return reseal(b) }, ErrVersion},
		{"version zero", func(b []byte) []byte { b[4] = 0; return reseal(b) }, ErrVersion},
		{"wrong magic", func(b []byte) []byte { b[0] = 'X'; return reseal(b) }, ErrMagic},
		{"lower-case magic", func(b []byte) []byte { b[1] = 'p'; return reseal(b) }, ErrMagic},
		{"unknown kind", func(b []byte) []byte { b[3] = 'Z'; return reseal(b) }, ErrMagic},
		{"bad checksum", func(b []byte) []byte { b[len(b)-1] ^= 0xff; return b }, ErrChecksum},
		{"trailing byte", func(b []byte) []byte { return reseal(append(b, 0)) }, nil}, // per decoder below
		{"empty", func([]byte) []byte { return nil }, ErrShort},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stepWant, hbWant := tc.want, tc.want
			if tc.want == nil {
				stepWant, hbWant = ErrTrailing, ErrShort // a heartbeat has one fixed length
			}
			if err := decodeStep(tc.tamper(step())); !errors.Is(err, stepWant) {
				t.Errorf("step: err = %v, want %v", err, stepWant)
			}
			if err := decodeHB(tc.tamper(hb())); !errors.Is(err, hbWant) {
				t.Errorf("heartbeat: err = %v, want %v", err, hbWant)
			}
		})
	}
	// A valid message of one kind is not accepted as the other.
	if err := decodeStep(hb()); !errors.Is(err, ErrMagic) {
		t.Errorf("heartbeat decoded as step: err = %v, want ErrMagic", err)
	}
	if err := decodeHB(step()); !errors.Is(err, ErrMagic) {
		t.Errorf("step decoded as heartbeat: err = %v, want ErrMagic", err)
	}
}

// TestStepBounds writes hostile counts into a resealed header: each must
// be refused before the decoder allocates for it.
func TestStepBounds(t *testing.T) {
	const (
		offTok = 28
		offRem = 32
		offAdm = 36
		offG   = 44
		offC   = 48
	)
	base := func() []byte { return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1}) }
	withAdmission := func() []byte {
		return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1, Admitted: []Admission{{Seq: 1, Prompt: []int32{1, 2}}}})
	}
	put := putCount
	withGrant := func() []byte {
		return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1, Grants: []Grant{{Seq: 1, Blocks: []uint32{1, 2}}}})
	}
	withChunk := func() []byte {
		return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1, Chunks: []Chunk{{Seq: 1, Fed: 3}}})
	}
	// Offset of the first admission's prompt length in withAdmission(),
	// and of the first grant's block count in withGrant().
	promptLenOff := stepHeaderLen + 8
	blocksOff := stepHeaderLen + 8
	refuseAll(t, []boundsCase{
		{"tokens over limit", put(base(), offTok, MaxTokens+1), ErrBounds},
		{"tokens max uint32", put(base(), offTok, math.MaxUint32), ErrBounds},
		{"removals over limit", put(base(), offRem, MaxRemovals+1), ErrBounds},
		{"removals max uint32", put(base(), offRem, math.MaxUint32), ErrBounds},
		{"admissions over limit", put(base(), offAdm, MaxAdmissions+1), ErrBounds},
		{"admissions max uint32", put(base(), offAdm, math.MaxUint32), ErrBounds},
		{"tokens at limit, bytes absent", put(base(), offTok, MaxTokens), ErrShort},
		{"removals at limit, bytes absent", put(base(), offRem, MaxRemovals), ErrShort},
		{"admissions at limit, bytes absent", put(base(), offAdm, MaxAdmissions), ErrShort},
		{"one token, bytes absent", put(base(), offTok, 1), ErrShort},
		{"prompt over limit", put(withAdmission(), promptLenOff, MaxPromptLen+1), ErrBounds},
		{"prompt max uint32", put(withAdmission(), promptLenOff, math.MaxUint32), ErrBounds},
		{"prompt at limit, bytes absent", put(withAdmission(), promptLenOff, MaxPromptLen), ErrShort},
		{"prompt one longer than present", put(withAdmission(), promptLenOff, 3), ErrShort},
		{"prompt shorter than present", put(withAdmission(), promptLenOff, 1), ErrTrailing},
		{"second admission claimed, header absent", put(withAdmission(), offAdm, 2), ErrShort},
		{"grants over limit", put(base(), offG, MaxGrants+1), ErrBounds},
		{"grants max uint32", put(base(), offG, math.MaxUint32), ErrBounds},
		{"chunks over limit", put(base(), offC, MaxChunks+1), ErrBounds},
		{"chunks max uint32", put(base(), offC, math.MaxUint32), ErrBounds},
		{"grants at limit, bytes absent", put(base(), offG, MaxGrants), ErrShort},
		{"chunks at limit, bytes absent", put(base(), offC, MaxChunks), ErrShort},
		{"one chunk, bytes absent", put(base(), offC, 1), ErrShort},
		{"grant of no blocks", put(withGrant(), blocksOff, 0), ErrBounds},
		{"grant blocks over limit", put(withGrant(), blocksOff, MaxGrantBlocks+1), ErrBounds},
		{"grant blocks max uint32", put(withGrant(), blocksOff, math.MaxUint32), ErrBounds},
		{"grant blocks at limit, bytes absent", put(withGrant(), blocksOff, MaxGrantBlocks), ErrShort},
		{"grant one block longer than present", put(withGrant(), blocksOff, 3), ErrShort},
		{"grant shorter than present", put(withGrant(), blocksOff, 1), ErrTrailing},
		{"second grant claimed, header absent", put(withGrant(), offG, 2), ErrShort},
		{"second chunk claimed, bytes absent", put(withChunk(), offC, 2), ErrShort},
		{"chunk claimed, grant bytes read as it", put(withGrant(), offC, 1), ErrShort},
	})
}

// putCount writes v at off of a step and reseals it.
func putCount(b []byte, off int, v uint32) []byte {
	binary.LittleEndian.PutUint32(b[off:], v)
	return reseal(b)
}

// TestStepHitBounds: hostile hit counts, and counts that make the chunks
// and hits disagree with the bytes, are refused before allocating.
func TestStepHitBounds(t *testing.T) {
	const offC, offH = 48, 52
	base := func() []byte { return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1}) }
	withChunk := func() []byte {
		return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1, Chunks: []Chunk{{Seq: 1, Fed: 3}}})
	}
	withHit := func() []byte {
		return testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1, Chunks: []Chunk{{Seq: 1, Fed: 3}}, Hits: []Hit{{Seq: 1, Tokens: 2}}})
	}
	put := putCount
	refuseAll(t, []boundsCase{
		{"hits over limit", put(base(), offH, MaxHits+1), ErrBounds},
		{"hits max uint32", put(base(), offH, math.MaxUint32), ErrBounds},
		{"hits at limit, bytes absent", put(base(), offH, MaxHits), ErrShort},
		{"one hit, bytes absent", put(base(), offH, 1), ErrShort},
		{"second hit claimed, bytes absent", put(withHit(), offH, 2), ErrShort},
		{"hit unclaimed, its bytes trail", put(withHit(), offH, 0), ErrTrailing},
		{"hit claimed, chunk bytes read as it", put(withChunk(), offH, 1), ErrShort},
		{"chunk unclaimed, read as the hit", put(withHit(), offC, 0), ErrTrailing},
	})
}

// boundsCase is a hostile message and the error it must be refused with.
type boundsCase struct {
	name string
	msg  []byte
	want error
}

// refuseAll decodes every case's message, expecting its error, with
// few allocations: none sized from a hostile count.
func refuseAll(t *testing.T, cases []boundsCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var got Step
			var err error
			allocs := testing.AllocsPerRun(1, func() { err = testCodec.DecodeStep(tc.msg, &got) })
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			// The error message and its wrapping allocate a little; a
			// slice sized from the hostile count would be far bigger, which
			// the byte count below catches.
			if allocs > 10 {
				t.Errorf("%v allocations while refusing a hostile count", allocs)
			}
		})
	}
}

// TestStepBoundsNoHugeAllocation checks the bytes allocated while refusing
// the largest prompt the limits allow but the message does not hold: a
// decoder that allocated first would take 4 MiB per call.
func TestStepBoundsNoHugeAllocation(t *testing.T) {
	msg := testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1, Admitted: []Admission{{Seq: 1, Prompt: []int32{1}}}})
	binary.LittleEndian.PutUint32(msg[stepHeaderLen+8:], MaxPromptLen)
	reseal(msg)
	var s Step
	_ = testCodec.DecodeStep(msg, &s) // warm
	const runs = 16
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if err := testCodec.DecodeStep(msg, &s); !errors.Is(err, ErrShort) {
			t.Fatalf("err = %v, want ErrShort", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 64<<10 {
		t.Fatalf("refusing a prompt length of %d allocated %d bytes per decode", MaxPromptLen, per)
	}
}

func TestDecodeStepReusesSlices(t *testing.T) {
	src := &Step{Epoch: 1, Step: 5, Removed: []uint64{9, 10}}
	for i := range 64 {
		src.Tokens = append(src.Tokens, Token{Seq: uint64(i), Token: int32(i)})
	}
	msg := testCodec.AppendStep(nil, src)
	var dst Step
	if err := testCodec.DecodeStep(msg, &dst); err != nil { // warm
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if err := testCodec.DecodeStep(msg, &dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("decoding into a warmed Step allocated %v times, want 0", allocs)
	}
	if len(dst.Tokens) != 64 || len(dst.Removed) != 2 || len(dst.Admitted) != 0 {
		t.Fatalf("decoded %+v", dst)
	}
	// A shorter step into the same destination shrinks the slices.
	short := testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 6, Tokens: []Token{{Seq: 1, Token: 2}}})
	if err := testCodec.DecodeStep(short, &dst); err != nil {
		t.Fatal(err)
	}
	if len(dst.Tokens) != 1 || len(dst.Removed) != 0 || dst.Step != 6 {
		t.Fatalf("decoded %+v", dst)
	}
}

func TestJobHash(t *testing.T) {
	if JobHash("a") == JobHash("b") {
		t.Fatal("different jobs hash alike")
	}
	// The hash travels in every message header, so every process on every
	// architecture must compute the same value for a job: pin it to known
	// FNV-1a 64 answers, which a per-process seed or another hash would
	// break (the empty string hashes to the offset basis).
	for job, want := range map[string]uint64{
		"":    0xcbf29ce484222325,
		"a":   0xaf63dc4c8601ec8c,
		"job": 0x45627c193a5b605c,
	} {
		if got := JobHash(job); got != want {
			t.Errorf("JobHash(%q) = %#x, want %#x", job, got, want)
		}
	}
}

// fuzzCodecs are the receivers every fuzz target decodes with.
var fuzzCodecs = []*Codec{testCodec, keyedCodec}

// fuzzInput is what c decodes of the fuzzer's data: the data itself
// without a key; with one, the data resealed under it, since random bytes
// never carry a valid MAC and would not reach the checks behind it.
func fuzzInput(c *Codec, data []byte) []byte {
	if !c.Keyed() || len(data) < trailerLen {
		return data
	}
	return resealWith(c, bytes.Clone(data))
}

// checkReencoding fails t unless out, the re-encoding of what c decoded
// from in, is in itself: without a key up to the MAC, which c neither
// checks nor keeps (it writes zeros).
func checkReencoding(t *testing.T, c *Codec, in, out []byte) {
	t.Helper()
	want := in
	if !c.Keyed() {
		want = resealWith(c, bytes.Clone(in))
	}
	if !bytes.Equal(out, want) {
		t.Fatalf("keyed %v: re-encoding a decoded message differs:\n in  %x\n out %x", c.Keyed(), in, out)
	}
}

func FuzzDecodeStep(f *testing.F) {
	for _, s := range sampleSteps() {
		f.Add(testCodec.AppendStep(nil, s))
		f.Add(keyedCodec.AppendStep(nil, s))
	}
	f.Add([]byte{})
	f.Add([]byte("TPCS"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range fuzzCodecs {
			msg := fuzzInput(c, data)
			var s Step
			err := c.DecodeStep(msg, &s)
			if _, _, perr := c.PeekStep(msg); err == nil && perr != nil {
				t.Fatalf("keyed %v: PeekStep refuses a step DecodeStep takes: %v", c.Keyed(), perr)
			}
			if err == nil {
				checkReencoding(t, c, msg, c.AppendStep(nil, &s))
			}
		}
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	for _, h := range sampleHeartbeats() {
		f.Add(testCodec.AppendHeartbeat(nil, h))
		f.Add(keyedCodec.AppendHeartbeat(nil, h))
	}
	f.Add([]byte{})
	f.Add([]byte("TPCH"))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range fuzzCodecs {
			msg := fuzzInput(c, data)
			var h Heartbeat
			if err := c.DecodeHeartbeat(msg, &h); err == nil {
				checkReencoding(t, c, msg, c.AppendHeartbeat(nil, &h))
			}
		}
	})
}

// TestReservedBytes: reserved bytes are zero in this version. A decoder
// that ignored them would accept messages it cannot re-encode, so the
// digest a rank folds (from the re-encoding) would not describe what it
// received.
func TestReservedBytes(t *testing.T) {
	steps := map[string]int{"header": 5, "header end": 7}
	for name, off := range steps {
		msg := testCodec.AppendStep(nil, sampleSteps()["one of each"])
		msg[off] = 1
		reseal(msg)
		var s Step
		if err := testCodec.DecodeStep(msg, &s); !errors.Is(err, ErrVersion) {
			t.Errorf("step, %s byte %d set: err = %v, want ErrVersion", name, off, err)
		}
	}
	hbs := map[string]int{"header": 6, "heartbeat reserved": 25, "heartbeat reserved end": 27}
	for name, off := range hbs {
		msg := testCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"])
		msg[off] = 1
		reseal(msg)
		var h Heartbeat
		if err := testCodec.DecodeHeartbeat(msg, &h); !errors.Is(err, ErrVersion) {
			t.Errorf("heartbeat, %s byte %d set: err = %v, want ErrVersion", name, off, err)
		}
	}
}

// le reads the little-endian unsigned integer of len(b) bytes.
func le(b []byte) uint64 {
	var v uint64
	for i := len(b) - 1; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

// TestHeartbeatLayout pins the heartbeat's bytes to the table in
// docs/protocol.md: 88 bytes, the sender's leader at offset 52, its KV
// capacity at 56, 60 and 64, the MAC at 68 (zero without a key, else
// HMAC-SHA256 of bytes 0-67 truncated to 16 bytes), the CRC-32C of bytes
// 0-83 at 84.
func TestHeartbeatLayout(t *testing.T) {
	h := sampleHeartbeats()["typical"]
	for _, c := range []*Codec{testCodec, keyedCodec} {
		msg := c.AppendHeartbeat(nil, h)
		if len(msg) != 88 || heartbeatLen != 88 {
			t.Fatalf("heartbeat is %d bytes (heartbeatLen %d), want 88", len(msg), heartbeatLen)
		}
		if string(msg[:4]) != "TPCH" || msg[4] != Version || Version != 4 {
			t.Fatalf("header % x, want TPCH and version 4", msg[:5])
		}
		for _, f := range []struct {
			name      string
			off, size int
			want      uint64
		}{
			{"job hash", 8, 8, testJobHash},
			{"epoch", 16, 4, uint64(h.Epoch)},
			{"rank", 20, 4, uint64(h.Rank)},
			{"phase", 24, 1, uint64(h.Phase)},
			{"reserved", 25, 3, 0},
			{"applied", 28, 8, h.Applied},
			{"digest", 36, 8, h.Digest},
			{"clock", 44, 8, uint64(h.UnixNs)},
			{"leader", 52, 4, uint64(h.Leader)},
			{"kv block size", 56, 4, uint64(h.KV.BlockSize)},
			{"kv blocks", 60, 4, uint64(h.KV.Blocks)},
			{"max model len", 64, 4, uint64(h.KV.MaxModelLen)},
			{"crc-32c", 84, 4, uint64(crc32.Checksum(msg[:84], crc32.MakeTable(crc32.Castagnoli)))},
		} {
			if got := le(msg[f.off : f.off+f.size]); got != f.want {
				t.Errorf("keyed %v: %s at %d: %#x, want %#x", c.Keyed(), f.name, f.off, got, f.want)
			}
		}
		if want := refMAC(c, msg[:68]); !bytes.Equal(msg[68:84], want) {
			t.Errorf("keyed %v: MAC at 68 is %x, want %x", c.Keyed(), msg[68:84], want)
		}
	}
}

// TestHeartbeatStrict: a heartbeat has exactly one length, and the leader
// field is covered by the checksum; a version 1 heartbeat (56 bytes, no
// leader), a version 2 one (60 bytes, no MAC) and a version 3 one (76
// bytes, no KV capacity) are refused as other versions.
func TestHeartbeatStrict(t *testing.T) {
	msg := func() []byte { return testCodec.AppendHeartbeat(nil, sampleHeartbeats()["typical"]) }
	older := func(version byte, n int) func() []byte {
		return func() []byte {
			b := append(msg()[:n-checksumLen:n-checksumLen], 0, 0, 0, 0) // keep room for the CRC
			b[4] = version
			return reseal(b)
		}
	}
	v1, v2, v3 := older(1, 56), older(2, 60), older(3, 76)
	for _, tc := range []struct {
		name string
		msg  []byte
		want error
	}{
		{"without the leader field", reseal(append(msg()[:52:52], 0, 0, 0, 0)), ErrShort},
		{"four bytes more", reseal(append(msg(), 0, 0, 0, 0)), ErrShort},
		{"without the MAC", reseal(append(msg()[:56:56], 0, 0, 0, 0)), ErrShort},
		{"version 1 layout", v1(), ErrVersion},
		{"version 2 layout", v2(), ErrVersion},
		{"version 3 layout", v3(), ErrVersion},
		{"without the KV capacity", reseal(append(msg()[:56:56], make([]byte, 20)...)), ErrShort},
		{"leader changed, checksum not", func() []byte { b := msg(); b[52] ^= 1; return b }(), ErrChecksum},
		{"KV blocks changed, checksum not", func() []byte { b := msg(); b[60] ^= 1; return b }(), ErrChecksum},
		{"MAC changed, checksum not", func() []byte { b := msg(); b[72] ^= 1; return b }(), ErrChecksum},
		{"checksum corrupted", func() []byte { b := msg(); b[85] ^= 0x80; return b }(), ErrChecksum},
	} {
		var h Heartbeat
		if err := testCodec.DecodeHeartbeat(tc.msg, &h); !errors.Is(err, tc.want) {
			t.Errorf("%s (%d bytes): err = %v, want %v", tc.name, len(tc.msg), err, tc.want)
		}
	}
	// A resealed leader change is simply another leader: refusing it is
	// the receiver's job (rank.Driver), not the codec's.
	b := msg()
	binary.LittleEndian.PutUint32(b[52:], 0x0badf00d)
	var h Heartbeat
	if err := testCodec.DecodeHeartbeat(reseal(b), &h); err != nil || h.Leader != 0x0badf00d {
		t.Errorf("resealed leader: %+v, %v", h, err)
	}
}

// TestStepSizeTable pins StepSize to the layout in docs/protocol.md: a
// 56-byte header and the 20-byte trailer, 12 bytes a token, 8 a removal,
// 16 plus 4 a token an admission, 12 plus 4 a block a grant, 12 a chunk,
// 12 a hit.
func TestStepSizeTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    *Step
		want int
	}{
		{"empty", &Step{}, 76},
		{"one token", &Step{Tokens: []Token{{}}}, 88},
		{"one removal", &Step{Removed: []uint64{1}}, 84},
		{"admission of 3+2", &Step{Admitted: []Admission{{Prompt: make([]int32, 3), Output: make([]int32, 2)}}}, 76 + 16 + 20},
		{"grant of 1 block", &Step{Grants: []Grant{{Blocks: []uint32{1}}}}, 76 + 16},
		{"grants of 2 and 5", &Step{Grants: []Grant{{Blocks: make([]uint32, 2)}, {Blocks: make([]uint32, 5)}}}, 76 + 20 + 32},
		{"two chunks", &Step{Chunks: []Chunk{{}, {}}}, 76 + 24},
		{"three hits", &Step{Hits: []Hit{{}, {}, {}}}, 76 + 36},
		{"all", sampleSteps()["one of each"], 76 + 12 + 8 + (16 + 12) + (16 + 12) + 16 + 12 + 12},
	} {
		if got := StepSize(tc.s); got != tc.want {
			t.Errorf("%s: StepSize %d, want %d", tc.name, got, tc.want)
		}
		if got := len(testCodec.AppendStep(nil, tc.s)); got != tc.want {
			t.Errorf("%s: encoding is %d bytes, want %d", tc.name, got, tc.want)
		}
	}
	if GrantSize(3) != 24 || ChunkSize != 12 || AdmissionSize(2) != 24 || HitSize != 12 {
		t.Errorf("GrantSize(3) %d, ChunkSize %d, AdmissionSize(2) %d, HitSize %d; want 24, 12, 24, 12", GrantSize(3), ChunkSize, AdmissionSize(2), HitSize)
	}
}

// TestGrantBoundsNoHugeAllocation: refusing a grant that claims the most
// blocks the limit allows, which the message does not hold, allocates
// nothing sized from the claim (8 MiB).
func TestGrantBoundsNoHugeAllocation(t *testing.T) {
	msg := testCodec.AppendStep(nil, &Step{Epoch: 1, Step: 1, Grants: []Grant{{Seq: 1, Blocks: []uint32{1}}}})
	binary.LittleEndian.PutUint32(msg[stepHeaderLen+8:], MaxGrantBlocks)
	reseal(msg)
	var s Step
	const runs = 16
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		if err := testCodec.DecodeStep(msg, &s); !errors.Is(err, ErrShort) {
			t.Fatalf("err = %v, want ErrShort", err)
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / runs; per > 64<<10 {
		t.Fatalf("refusing a grant of %d blocks allocated %d bytes per decode", MaxGrantBlocks, per)
	}
}
