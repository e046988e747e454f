package broadcast

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
)

// Version is the wire protocol version. A message with another version is
// rejected, never guessed at. It changes with any layout change; members
// advertise it, so ranks of different versions refuse each other at
// rendezvous. Version 2 added the leader ID to heartbeats and replay
// replies; version 3 the MAC before the checksum of every message;
// version 4 the KV block grants, prefill chunks and prefix cache hits of
// a step and the KV capacity of a heartbeat.
const Version = 4

// Message kinds, the fourth byte of the magic.
const (
	KindStep      = 'S'
	KindHeartbeat = 'H'
)

// Limits keep a decoder from being driven into huge allocations by a hostile
// or corrupt message: counts are checked against these and against the bytes
// actually present before anything is allocated.
const (
	MaxAdmissions = 4096
	MaxPromptLen  = 1 << 20
	MaxRemovals   = 4096
	MaxTokens     = 4096
	MaxGrants     = 4096
	MaxChunks     = 4096
	MaxHits       = 4096
	// MaxGrantBlocks bounds the blocks of one grant: 2^21 blocks of one
	// token would hold a sequence twice MaxPromptLen long.
	MaxGrantBlocks = 1 << 21
	stepHeaderLen  = 56
	heartbeatLen   = 88
	checksumLen    = 4
	// trailerLen is what ends every message: the MAC, then the CRC.
	trailerLen     = MACSize + checksumLen
	admissionFixed = 16
	tokenLen       = 12
	grantFixed     = 12
	chunkLen       = 12
	hitLen         = 12
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors a decoder returns. They are wrapped with detail; test with errors.Is.
var (
	ErrShort    = errors.New("message truncated")
	ErrMagic    = errors.New("bad magic")
	ErrVersion  = errors.New("unsupported protocol version")
	ErrChecksum = errors.New("checksum mismatch")
	ErrJob      = errors.New("message is for another job")
	ErrBounds   = errors.New("count out of bounds")
	ErrTrailing = errors.New("trailing bytes")
	// ErrMAC: the message's MAC does not verify under this job's key (it
	// was forged, sealed with another key, or sent without one).
	ErrMAC = errors.New("MAC does not verify")
)

// Admission brings a sequence into the batch. Output is empty for a new
// request; a request re-admitted after the world re-formed (a new epoch)
// brings the tokens it already had, so it continues where it stopped.
type Admission struct {
	Seq    uint64
	Prompt []int32
	Output []int32
}

// Token is the token sampled for one sequence at the previous step.
type Token struct {
	Seq   uint64
	Token int32
}

// Step is one decode step as rank 0 publishes it. Applying it means: append
// Tokens to their sequences, drop Removed, append Admitted, grow the named
// rows' block tables by Grants, set the Fed of the rows named in Chunks, in
// that order; Hits say which admitted rows start with a cached prefix.
type Step struct {
	Epoch uint32
	// Leader identifies the rank 0 process that published the step (a
	// random non-zero number it picks at start and advertises in its
	// membership metadata), so followers refuse steps from any other
	// publisher, such as a stale rank 0 of an earlier run of the job.
	Leader   uint32
	Step     uint64
	Tokens   []Token
	Removed  []uint64
	Admitted []Admission
	// Grants are the KV blocks rank 0 gave rows of this step's batch:
	// each named row's block table grows by them, in order.
	Grants []Grant
	// Chunks name the rows this step's forward pass feeds only part of
	// (they are prefilling): the row's Fed. Every other row is fed whole.
	Chunks []Chunk
	// Hits name the rows admitted in this step whose tables start with
	// blocks they share, already written: the tokens those hold.
	Hits []Hit
}

// Hit says that sequence Seq, admitted in this step, starts with a
// cached prefix of Tokens tokens held in the first blocks of its table.
type Hit struct {
	Seq    uint64
	Tokens uint32
}

// Grant is blocks appended to one sequence's KV block table.
type Grant struct {
	Seq    uint64
	Blocks []uint32
}

// Chunk says that after this step's forward pass the workers hold only
// the first Fed tokens of sequence Seq: it is still prefilling.
type Chunk struct {
	Seq uint64
	Fed uint32
}

// KVCapacity is a rank's KV cache as its executor reported it (all zero:
// none). Every rank's must be the same.
type KVCapacity struct {
	BlockSize   uint32 // tokens per block
	Blocks      uint32 // blocks in the pool
	MaxModelLen uint32 // the model's context, 0: none
}

// JobHash is the 64-bit FNV-1a hash of the job ID that every message
// carries, so a message published on the wrong job's subject is refused.
func JobHash(job string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(job))
	return h.Sum64()
}

func putHeader(b []byte, kind byte, job uint64) {
	b[0], b[1], b[2], b[3] = 'T', 'P', 'C', kind
	b[4] = Version
	b[5], b[6], b[7] = 0, 0, 0
	binary.LittleEndian.PutUint64(b[8:], job)
}

// checkReserved refuses non-zero reserved bytes: this version writes zeros,
// and a decoder that ignored them would accept messages whose re-encoding
// (which the rolling digest is computed from) differs from what was sent.
func checkReserved(r []byte) error {
	for _, v := range r {
		if v != 0 {
			return fmt.Errorf("%w: reserved bytes % x are not zero", ErrVersion, r)
		}
	}
	return nil
}

// StepSize is the length of s's encoding.
func StepSize(s *Step) int {
	n := stepHeaderLen + trailerLen + len(s.Tokens)*tokenLen + 8*len(s.Removed)
	for _, a := range s.Admitted {
		n += AdmissionSize(len(a.Prompt) + len(a.Output))
	}
	for _, g := range s.Grants {
		n += GrantSize(len(g.Blocks))
	}
	return n + chunkLen*len(s.Chunks) + hitLen*len(s.Hits)
}

// GrantSize is the encoded size of a grant of n blocks.
func GrantSize(n int) int { return grantFixed + 4*n }

// ChunkSize is the encoded size of one chunk.
const ChunkSize = chunkLen

// HitSize is the encoded size of one prefix cache hit.
const HitSize = hitLen

// AdmissionSize is the encoded size of an admission carrying n tokens
// (prompt and output together).
func AdmissionSize(n int) int { return admissionFixed + 4*n }

// AppendStep appends the encoding of s to dst, sealed, and returns it.
func (c *Codec) AppendStep(dst []byte, s *Step) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, stepHeaderLen)...)
	h := dst[start:]
	putHeader(h, KindStep, c.job)
	binary.LittleEndian.PutUint32(h[16:], s.Epoch)
	binary.LittleEndian.PutUint64(h[20:], s.Step)
	binary.LittleEndian.PutUint32(h[28:], uint32(len(s.Tokens)))
	binary.LittleEndian.PutUint32(h[32:], uint32(len(s.Removed)))
	binary.LittleEndian.PutUint32(h[36:], uint32(len(s.Admitted)))
	binary.LittleEndian.PutUint32(h[40:], s.Leader)
	binary.LittleEndian.PutUint32(h[44:], uint32(len(s.Grants)))
	binary.LittleEndian.PutUint32(h[48:], uint32(len(s.Chunks)))
	binary.LittleEndian.PutUint32(h[52:], uint32(len(s.Hits)))
	for _, t := range s.Tokens {
		dst = binary.LittleEndian.AppendUint64(dst, t.Seq)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(t.Token))
	}
	for _, r := range s.Removed {
		dst = binary.LittleEndian.AppendUint64(dst, r)
	}
	for _, a := range s.Admitted {
		dst = binary.LittleEndian.AppendUint64(dst, a.Seq)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(a.Prompt)))
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(a.Output)))
		for _, p := range a.Prompt {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(p))
		}
		for _, t := range a.Output {
			dst = binary.LittleEndian.AppendUint32(dst, uint32(t))
		}
	}
	for _, g := range s.Grants {
		dst = binary.LittleEndian.AppendUint64(dst, g.Seq)
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(g.Blocks)))
		for _, b := range g.Blocks {
			dst = binary.LittleEndian.AppendUint32(dst, b)
		}
	}
	for _, ch := range s.Chunks {
		dst = binary.LittleEndian.AppendUint64(dst, ch.Seq)
		dst = binary.LittleEndian.AppendUint32(dst, ch.Fed)
	}
	for _, ht := range s.Hits {
		dst = binary.LittleEndian.AppendUint64(dst, ht.Seq)
		dst = binary.LittleEndian.AppendUint32(dst, ht.Tokens)
	}
	return c.seal(dst, start)
}

// PeekStep checks a step message's header, checksum and MAC and returns
// its epoch and step number without decoding the body: cheap enough for a
// subscription callback to drop garbage, forgeries and duplicates before
// they queue.
func (c *Codec) PeekStep(b []byte) (epoch uint32, step uint64, err error) {
	if err := c.checkHeader(b, KindStep); err != nil {
		return 0, 0, err
	}
	if len(b) < stepHeaderLen+trailerLen {
		return 0, 0, fmt.Errorf("%w: step header needs %d bytes, have %d", ErrShort, stepHeaderLen+trailerLen, len(b))
	}
	return binary.LittleEndian.Uint32(b[16:]), binary.LittleEndian.Uint64(b[20:]), nil
}

// DecodeStep decodes b into s, reusing s's slices. It never panics and
// checks every count against the limits and the bytes present.
func (c *Codec) DecodeStep(b []byte, s *Step) error {
	if err := c.checkHeader(b, KindStep); err != nil {
		return err
	}
	if len(b) < stepHeaderLen+trailerLen {
		return fmt.Errorf("%w: step header needs %d bytes, have %d", ErrShort, stepHeaderLen+trailerLen, len(b))
	}
	body := b[:len(b)-trailerLen]
	s.Epoch = binary.LittleEndian.Uint32(body[16:])
	s.Leader = binary.LittleEndian.Uint32(body[40:])
	s.Step = binary.LittleEndian.Uint64(body[20:])
	n, err := readCounts(body)
	if err != nil {
		return err
	}
	p := body[stepHeaderLen:]
	if need := n.fixedBytes(); uint64(len(p)) < need {
		return fmt.Errorf("%w: counts need at least %d bytes, have %d", ErrShort, need, len(p))
	}
	p = decodeTokens(p, s, n)
	s.Admitted = s.Admitted[:0]
	for i := range n.adm {
		a, rest, err := decodeAdmission(p, i)
		if err != nil {
			return err
		}
		s.Admitted = append(s.Admitted, a)
		p = rest
	}
	if p, err = decodeGrants(p, s, n.grants); err != nil {
		return err
	}
	if uint64(len(p)) != uint64(n.chunks)*chunkLen+uint64(n.hits)*hitLen {
		return decodeTailError(p, n)
	}
	s.Chunks = s.Chunks[:0]
	for range n.chunks {
		s.Chunks = append(s.Chunks, Chunk{Seq: binary.LittleEndian.Uint64(p), Fed: binary.LittleEndian.Uint32(p[8:])})
		p = p[chunkLen:]
	}
	s.Hits = s.Hits[:0]
	for range n.hits {
		s.Hits = append(s.Hits, Hit{Seq: binary.LittleEndian.Uint64(p), Tokens: binary.LittleEndian.Uint32(p[8:])})
		p = p[hitLen:]
	}
	return nil
}

// decodeTailError says what is wrong with p, the bytes after the grants,
// when they are not exactly the chunks and hits the counts announce.
func decodeTailError(p []byte, n stepCounts) error {
	need := uint64(n.chunks)*chunkLen + uint64(n.hits)*hitLen
	if uint64(len(p)) < need {
		return fmt.Errorf("%w: %d chunks and %d hits need %d bytes, have %d", ErrShort, n.chunks, n.hits, need, len(p))
	}
	return fmt.Errorf("%w: %d bytes after the last hit", ErrTrailing, uint64(len(p))-need)
}

// stepCounts are the counts of a step's header.
type stepCounts struct{ tok, rem, adm, grants, chunks, hits uint32 }

// readCounts reads the counts at offsets 28, 32, 36, 44, 48 and 52 of a
// step and checks them against the limits.
func readCounts(body []byte) (stepCounts, error) {
	n := stepCounts{
		tok: binary.LittleEndian.Uint32(body[28:]), rem: binary.LittleEndian.Uint32(body[32:]),
		adm: binary.LittleEndian.Uint32(body[36:]), grants: binary.LittleEndian.Uint32(body[44:]),
		chunks: binary.LittleEndian.Uint32(body[48:]), hits: binary.LittleEndian.Uint32(body[52:]),
	}
	if n.tok > MaxTokens || n.rem > MaxRemovals || n.adm > MaxAdmissions || n.grants > MaxGrants || n.chunks > MaxChunks || n.hits > MaxHits {
		return n, fmt.Errorf("%w: tokens %d (max %d), removals %d (max %d), admissions %d (max %d), grants %d (max %d), chunks %d (max %d), hits %d (max %d)",
			ErrBounds, n.tok, MaxTokens, n.rem, MaxRemovals, n.adm, MaxAdmissions, n.grants, MaxGrants, n.chunks, MaxChunks, n.hits, MaxHits)
	}
	return n, nil
}

// fixedBytes is the least the body after the header can hold with these
// counts: every entry with no prompt, output or blocks.
func (n stepCounts) fixedBytes() uint64 {
	return uint64(n.tok)*tokenLen + uint64(n.rem)*8 + uint64(n.adm)*admissionFixed + uint64(n.grants)*grantFixed +
		uint64(n.chunks)*chunkLen + uint64(n.hits)*hitLen
}

// decodeTokens decodes the tokens and removals, whose bytes the caller
// has checked are present, and returns the bytes after them.
func decodeTokens(p []byte, s *Step, n stepCounts) []byte {
	s.Tokens = s.Tokens[:0]
	for range n.tok {
		s.Tokens = append(s.Tokens, Token{Seq: binary.LittleEndian.Uint64(p), Token: int32(binary.LittleEndian.Uint32(p[8:]))})
		p = p[tokenLen:]
	}
	s.Removed = s.Removed[:0]
	for range n.rem {
		s.Removed = append(s.Removed, binary.LittleEndian.Uint64(p))
		p = p[8:]
	}
	return p
}

// decodeGrants decodes n grants from the start of p into s.Grants and
// returns the bytes after them. A grant's blocks are checked against the
// limit and the bytes present before they are allocated.
func decodeGrants(p []byte, s *Step, n uint32) ([]byte, error) {
	s.Grants = s.Grants[:0]
	for i := range n {
		if len(p) < grantFixed {
			return nil, fmt.Errorf("%w: grant %d header", ErrShort, i)
		}
		seq, nb := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint32(p[8:])
		p = p[grantFixed:]
		if nb < 1 || nb > MaxGrantBlocks {
			return nil, fmt.Errorf("%w: grant %d (sequence %d) has %d blocks, want 1 to %d", ErrBounds, i, seq, nb, MaxGrantBlocks)
		}
		if uint64(len(p)) < uint64(nb)*4 {
			return nil, fmt.Errorf("%w: grant %d (sequence %d) blocks need %d bytes, have %d", ErrShort, i, seq, uint64(nb)*4, len(p))
		}
		g := Grant{Seq: seq, Blocks: make([]uint32, nb)}
		for j := range g.Blocks {
			g.Blocks[j] = binary.LittleEndian.Uint32(p[4*j:])
		}
		p = p[4*nb:]
		s.Grants = append(s.Grants, g)
	}
	return p, nil
}

// decodeAdmission decodes admission i from the start of p and returns it
// with the bytes after it.
func decodeAdmission(p []byte, i uint32) (Admission, []byte, error) {
	if len(p) < admissionFixed {
		return Admission{}, nil, fmt.Errorf("%w: admission %d header", ErrShort, i)
	}
	seq, n, nOut := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint32(p[8:]), binary.LittleEndian.Uint32(p[12:])
	p = p[admissionFixed:]
	if n > MaxPromptLen || nOut > MaxPromptLen {
		return Admission{}, nil, fmt.Errorf("%w: admission %d prompt length %d, output length %d (max %d each)", ErrBounds, i, n, nOut, MaxPromptLen)
	}
	if uint64(len(p)) < (uint64(n)+uint64(nOut))*4 {
		return Admission{}, nil, fmt.Errorf("%w: admission %d tokens need %d bytes, have %d", ErrShort, i, (n+nOut)*4, len(p))
	}
	a := Admission{Seq: seq, Prompt: make([]int32, n)}
	for j := range a.Prompt {
		a.Prompt[j] = int32(binary.LittleEndian.Uint32(p[4*j:]))
	}
	p = p[4*n:]
	if nOut > 0 {
		a.Output = make([]int32, nOut)
		for j := range a.Output {
			a.Output[j] = int32(binary.LittleEndian.Uint32(p[4*j:]))
		}
		p = p[4*nOut:]
	}
	return a, p, nil
}

// Phase is a rank's state as it reports it.
type Phase uint8

// Phases in the order a rank normally goes through them.
const (
	PhaseJoining Phase = iota
	PhaseReady
	PhaseRunning
	PhaseStopping
	PhaseAborted
)

var phaseNames = [...]string{"joining", "ready", "running", "stopping", "aborted"}

func (p Phase) String() string {
	if int(p) < len(phaseNames) {
		return phaseNames[p]
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// Heartbeat is what each rank reports to rank 0 after every applied step
// and periodically: its last applied step and the rolling digest after it.
type Heartbeat struct {
	Epoch   uint32
	Rank    uint32
	Phase   Phase
	Applied uint64 // last applied step, 0 when none
	Digest  uint64
	UnixNs  int64 // sender's clock when sent; informational only
	// Leader is the sender's view of rank 0's publisher ID (Step.Leader):
	// rank 0's own ID in its heartbeat, in a follower's the leader of the
	// last step it applied (0 before the first). A receiver that follows
	// another leader refuses the heartbeat.
	Leader uint32
	// KV is the sender's KV capacity; rank 0 refuses a follower's that
	// differs from its own.
	KV KVCapacity
}

// AppendHeartbeat appends the encoding of h to dst, sealed.
func (c *Codec) AppendHeartbeat(dst []byte, h *Heartbeat) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, heartbeatLen-trailerLen)...)
	b := dst[start:]
	putHeader(b, KindHeartbeat, c.job)
	binary.LittleEndian.PutUint32(b[16:], h.Epoch)
	binary.LittleEndian.PutUint32(b[20:], h.Rank)
	b[24] = byte(h.Phase)
	b[25], b[26], b[27] = 0, 0, 0
	binary.LittleEndian.PutUint64(b[28:], h.Applied)
	binary.LittleEndian.PutUint64(b[36:], h.Digest)
	binary.LittleEndian.PutUint64(b[44:], uint64(h.UnixNs))
	binary.LittleEndian.PutUint32(b[52:], h.Leader)
	binary.LittleEndian.PutUint32(b[56:], h.KV.BlockSize)
	binary.LittleEndian.PutUint32(b[60:], h.KV.Blocks)
	binary.LittleEndian.PutUint32(b[64:], h.KV.MaxModelLen)
	return c.seal(dst, start)
}

// DecodeHeartbeat decodes b into h.
func (c *Codec) DecodeHeartbeat(b []byte, h *Heartbeat) error {
	if err := c.checkHeader(b, KindHeartbeat); err != nil {
		return err
	}
	if len(b) != heartbeatLen {
		return fmt.Errorf("%w: heartbeat is %d bytes, want %d", ErrShort, len(b), heartbeatLen)
	}
	if err := checkReserved(b[25:28]); err != nil {
		return err
	}
	h.Epoch = binary.LittleEndian.Uint32(b[16:])
	h.Rank = binary.LittleEndian.Uint32(b[20:])
	h.Phase = Phase(b[24])
	h.Applied = binary.LittleEndian.Uint64(b[28:])
	h.Digest = binary.LittleEndian.Uint64(b[36:])
	h.UnixNs = int64(binary.LittleEndian.Uint64(b[44:]))
	h.Leader = binary.LittleEndian.Uint32(b[52:])
	h.KV = KVCapacity{
		BlockSize:   binary.LittleEndian.Uint32(b[56:]),
		Blocks:      binary.LittleEndian.Uint32(b[60:]),
		MaxModelLen: binary.LittleEndian.Uint32(b[64:]),
	}
	return nil
}
