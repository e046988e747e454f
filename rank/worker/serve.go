package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"time"

	"github.com/tpcoord/tpcoord/internal/fielderr"
	"github.com/tpcoord/tpcoord/rank"
)

// ServeConfig configures Serve, the Go implementation of a
// model worker (the synthetic model behind the worker protocol). Zero
// values take the agent's value from HELLO; a set value is reported as it
// is, so the agent refuses a mismatch.
type ServeConfig struct {
	Vocab, MaxBatch int
	EOS             *int32
	DType           DType
	// Name is reported in HELLO_OK; PID too (default: this process).
	Name string
	PID  int
	// ForwardTime is the wall time of one forward pass, as in Synthetic.
	ForwardTime time.Duration
	// MaxVersion caps the protocol versions this worker speaks (default
	// and at most ProtocolVersion): 1 and 2 stand in for workers of those
	// versions.
	MaxVersion uint32
	// The paged KV cache HELLO_OK version 3 reports, which FORWARD rows
	// are checked against: KVBlocks blocks (0: none, rows bring no
	// blocks) of BlockSize tokens (default 16). With blocks the worker
	// keeps the token at each slot as its KV and computes the logits from
	// the history read back through a row's table. MaxModelLen is the
	// model's context (0: none), reported only.
	KVBlocks, BlockSize, MaxModelLen int
}

// DefaultBlockSize is ServeConfig.BlockSize's default (vLLM's).
const DefaultBlockSize = 16

// SocketEnv and RankEnv give a worker that Config.Command started the
// socket to connect to and its rank.
const (
	SocketEnv = "TPCOORD_WORKER_SOCKET"
	RankEnv   = "TPCOORD_WORKER_RANK"
)

// Validate reports the first invalid field.
func (c *ServeConfig) Validate() error {
	const most = math.MaxUint32
	switch {
	case c.MaxVersion > ProtocolVersion:
		return fielderr.New("MaxVersion", "this worker speaks protocol versions 1 to %d, not %d", ProtocolVersion, c.MaxVersion)
	case c.KVBlocks < 0 || c.KVBlocks > most:
		return fielderr.New("KVBlocks", "must be 0 to %d, got %d", uint32(most), c.KVBlocks)
	case c.BlockSize < 0 || c.BlockSize > most:
		return fielderr.New("BlockSize", "must be 1 to %d, got %d", uint32(most), c.BlockSize)
	case c.MaxModelLen < 0 || c.MaxModelLen > most:
		return fielderr.New("MaxModelLen", "must be 0 to %d, got %d", uint32(most), c.MaxModelLen)
	}
	return nil
}

// Serve speaks the worker side of the protocol on conn: HELLO, then
// FORWARD steps until SHUTDOWN or the agent closes the connection (both
// return nil). Cancelling ctx ends it with ctx's error. conn is closed on
// return.
func Serve(ctx context.Context, conn net.Conn, cfg ServeConfig) error {
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	s := &server{ctx: ctx, conn: conn, cfg: cfg}
	defer s.close()
	err := s.serve()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

type server struct {
	ctx   context.Context
	conn  net.Conn
	cfg   ServeConfig
	hello hello
	model *rank.Synthetic
	shm   *shmRegion
	rows  []rank.Seq  // version 1: the decoded rows
	batch []*rank.Seq // the rows of the current FORWARD
	fwd2  forward2    // versions 2 and 3: the decoded FORWARD
	held  seqs        // version 2: the sequences this worker holds
	paged paged       // version 3: the sequences, tables and KV it holds
	row   []float32
	in    []byte
	out   []byte
}

func (s *server) close() {
	if s.shm != nil {
		_ = s.shm.close()
	}
}

func (s *server) serve() error {
	typ, body, err := readFrame(s.conn, s.in, maxRequestBody)
	if err != nil {
		return err
	}
	if typ != frameHello {
		return s.fail(fmt.Errorf("%w: %s before HELLO", errGarbage, frameName(typ)))
	}
	ok, err := s.handshake(body)
	if err != nil {
		return s.fail(err)
	}
	if _, err := s.conn.Write(appendHelloOK(s.out[:0], &s.hello)); err != nil {
		return err
	}
	if !ok {
		// The agent will refuse us; wait for it to hang up.
		_, _ = io.Copy(io.Discard, s.conn)
		return io.EOF
	}
	for {
		typ, body, err := readFrame(s.conn, s.in, maxRequestBody)
		s.in = body
		if err != nil {
			return err
		}
		switch typ {
		case frameShutdown:
			return nil
		case frameForward:
			if err := s.forward(body); err != nil {
				return s.fail(err)
			}
		default:
			return s.fail(fmt.Errorf("%w: unexpected %s", errGarbage, frameName(typ)))
		}
	}
}

// fail tells the agent what went wrong, then ends the connection.
func (s *server) fail(err error) error {
	_, _ = s.conn.Write(appendError(nil, err.Error()))
	return err
}

// handshake fills s.hello with this worker's values; ok reports whether
// they match the agent's (only then is the shared memory opened). A
// version this worker cannot speak is an error (answered with ERROR).
func (s *server) handshake(body []byte) (ok bool, err error) {
	var h hello
	if err := decodeHello(body, &h); err != nil {
		return false, err
	}
	mine := s.reply(&h)
	if mine.Version, err = negotiate(h.Version, s.maxVersion()); err != nil {
		return false, err
	}
	s.hello = mine
	if helloMismatch(&h, &mine) != nil {
		return false, nil
	}
	if h.DType.Size() == 0 {
		return false, fmt.Errorf("unknown dtype code %d", h.DType)
	}
	s.paged = newPaged(mine.BlockSize, mine.Blocks)
	if s.model, err = rank.NewSynthetic(rank.SyntheticConfig{Vocab: int(h.Vocab), EOS: h.EOS, Logits: h.Logits}); err != nil {
		return false, err
	}
	if h.Logits {
		need := uint64(h.MaxBatch) * uint64(h.Vocab) * uint64(h.DType.Size())
		if h.ShmSize < need {
			return false, fmt.Errorf("shared memory of %d bytes is smaller than max batch × vocab × %d = %d", h.ShmSize, h.DType.Size(), need)
		}
		if s.shm, err = openShm(h.ShmPath, int(need)); err != nil {
			return false, fmt.Errorf("open shared memory: %w", err)
		}
	}
	return true, nil
}

func (s *server) maxVersion() uint32 {
	if s.cfg.MaxVersion == 0 {
		return ProtocolVersion
	}
	return min(s.cfg.MaxVersion, ProtocolVersion)
}

// reply is the HELLO_OK this worker answers h with, but for the version:
// the agent's values where the configuration sets none.
func (s *server) reply(h *hello) hello {
	mine := *h
	mine.Order = nativeOrder
	if s.cfg.Vocab > 0 {
		mine.Vocab = uint32(s.cfg.Vocab)
	}
	if s.cfg.MaxBatch > 0 {
		mine.MaxBatch = uint32(s.cfg.MaxBatch)
	}
	if s.cfg.EOS != nil {
		mine.EOS = *s.cfg.EOS
	}
	if s.cfg.DType != 0 {
		mine.DType = s.cfg.DType
	}
	mine.PID = uint32(s.cfg.PID)
	if mine.PID == 0 {
		mine.PID = uint32(os.Getpid())
	}
	mine.Name = s.cfg.Name
	if mine.Name == "" {
		mine.Name = "tpcoord worker (synthetic model)"
	}
	mine.BlockSize, mine.Blocks, mine.MaxModelLen = uint32(s.cfg.BlockSize), uint32(s.cfg.KVBlocks), uint32(s.cfg.MaxModelLen)
	if mine.BlockSize == 0 {
		mine.BlockSize = DefaultBlockSize
	}
	return mine
}

// forward runs one FORWARD: the rows' logits into the shared memory (on
// the rank with logits), the configured forward time, FORWARD_OK.
func (s *server) forward(body []byte) error {
	var step uint64
	var rows []*rank.Seq
	var err error
	switch s.hello.Version {
	case ProtocolV3:
		step, rows, err = s.apply3(body)
	case ProtocolV2:
		step, rows, err = s.apply2(body)
	default:
		step, rows, err = s.apply1(body)
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(s.cfg.ForwardTime)
	var written uint32
	if s.hello.Logits {
		s.logits(rows)
		written = uint32(len(rows))
	}
	if err := rank.WaitUntil(s.ctx, deadline); err != nil {
		return err
	}
	_, err = s.conn.Write(appendForwardOK(s.out[:0], step, written))
	return err
}

// apply1 decodes a version 1 FORWARD: every row is whole.
func (s *server) apply1(body []byte) (uint64, []*rank.Seq, error) {
	step, rows, err := decodeForward(body, s.hello.MaxBatch, s.rows)
	s.rows = rows
	if err != nil {
		return 0, nil, err
	}
	s.batch = s.batch[:0]
	for i := range rows {
		s.batch = append(s.batch, &rows[i])
	}
	return step, s.batch, nil
}

// logits writes the rows' logits into the shared memory: straight in
// (float32) or through one row of scratch (16-bit types). A nil row (a
// version 3 row without SAMPLE) is left unwritten.
func (s *server) logits(rows []*rank.Seq) {
	v := int(s.hello.Vocab)
	if s.hello.DType == Float32 {
		out := s.shm.float32s(len(rows) * v)
		for i, r := range rows {
			if r != nil {
				s.model.Row(r, out[i*v:(i+1)*v])
			}
		}
		return
	}
	if len(s.row) < v {
		s.row = make([]float32, v)
	}
	out := s.shm.uint16s(len(rows) * v)
	for i, r := range rows {
		if r == nil {
			continue
		}
		s.model.Row(r, s.row)
		narrow(out[i*v:(i+1)*v], s.row, s.hello.DType)
	}
}
