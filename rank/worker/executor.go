package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tpcoord/tpcoord/rank"
)

// DefaultForwardTimeout is Config.ForwardTimeout's default.
const DefaultForwardTimeout = 30 * time.Second

// DefaultStartTimeout is Config.StartTimeout's default: time to load a
// model and join its collectives before answering HELLO.
const DefaultStartTimeout = 5 * time.Minute

// Config configures the worker executor: the agent's side of a model
// worker process (docs/worker-protocol.md).
type Config struct {
	Rank, World     int
	Vocab, MaxBatch int
	EOS             int32 // -1 for none
	// DType is the logits element type the worker must write (rank 0).
	DType DType
	// Logits: this rank receives logits (rank 0). Only then is the
	// shared-memory region created.
	Logits bool

	// Command starts the worker (argv, no shell). "{socket}" and "{rank}"
	// in any argument are replaced by the socket path the agent listens on
	// and the rank; the worker also finds them in TPCOORD_WORKER_SOCKET
	// and TPCOORD_WORKER_RANK. The worker connects to the socket.
	Command []string
	// Env is added to the worker's environment (Command only).
	Env []string
	// Socket, when Command is empty, is the path of a running worker's
	// listening socket; the agent connects to it.
	Socket string

	ForwardTimeout time.Duration // one step's deadline (default 30s)
	StartTimeout   time.Duration // start, connect and handshake (default 5m)
	StopTimeout    time.Duration // Close: time for the worker to exit before SIGKILL (default 5s)
	// BlockSize is the agent's KV block size (--block-size): a version 3
	// worker with a block pool must report the same. 0: not checked.
	BlockSize int
	// MaxVersion is the protocol version HELLO offers (default and at
	// most ProtocolVersion); the worker may answer a lower one.
	MaxVersion uint32
	// ShmDir holds the logits file (default /dev/shm, else os.TempDir()).
	ShmDir string
	// Stdout and Stderr receive the worker process's output (nil: discarded).
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
}

func (c *Config) defaults() {
	if c.ForwardTimeout <= 0 {
		c.ForwardTimeout = DefaultForwardTimeout
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = DefaultStartTimeout
	}
	if c.StopTimeout <= 0 {
		c.StopTimeout = 5 * time.Second
	}
	if c.DType == 0 {
		c.DType = Float32
	}
	if c.MaxVersion == 0 {
		c.MaxVersion = ProtocolVersion
	}
	if c.ShmDir == "" {
		c.ShmDir = os.TempDir()
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			c.ShmDir = "/dev/shm"
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the configuration; errors name the field.
func (c *Config) Validate() error {
	switch {
	case c.World < 1 || c.Rank < 0 || c.Rank >= c.World:
		return fmt.Errorf("rank: %d is not in [0, %d)", c.Rank, c.World)
	case c.Vocab < 1:
		return fmt.Errorf("vocab: must be >= 1, got %d", c.Vocab)
	case c.MaxBatch < 1:
		return fmt.Errorf("max-batch: must be >= 1, got %d", c.MaxBatch)
	case c.BlockSize < 0 || c.BlockSize > math.MaxUint32:
		return fmt.Errorf("block-size: must be 0 to %d, got %d", uint32(math.MaxUint32), c.BlockSize)
	case c.DType != 0 && c.DType.Size() == 0:
		return fmt.Errorf("worker-dtype: unknown %v", c.DType)
	case c.MaxVersion > ProtocolVersion:
		return fmt.Errorf("max version: this agent speaks protocol versions 1 to %d, not %d", ProtocolVersion, c.MaxVersion)
	case len(c.Command) == 0 && c.Socket == "":
		return errors.New("worker-cmd or worker-socket: one is needed")
	case len(c.Command) > 0 && c.Socket != "":
		return errors.New("worker-cmd and worker-socket: give one, not both")
	}
	return nil
}

// Executor is the executor backed by a model worker process. Forward sends
// FORWARD over the socket and waits for FORWARD_OK; rank 0's logits are
// then in the shared-memory region, which Forward returns in place
// (float32) or widened into a buffer of its own (float16, bfloat16).
// Forward and Close must not run concurrently (the driver calls Forward
// from its loop and Close after Run returns).
type Executor struct {
	cfg  Config
	log  *slog.Logger
	conn net.Conn
	shm  *shmRegion
	dir  string // private directory of the listening socket

	cmd     *exec.Cmd
	tail    *outputTail   // the end of the process's stderr
	exited  chan struct{} // closed when the process has been reaped
	waitErr error         // valid after exited is closed
	pid     int
	name    string          // worker identity reported in HELLO_OK
	version uint32          // protocol version of the connection
	kv      rank.KVCapacity // what a version 3 worker reported
	delta   delta           // versions 2 and 3: what the worker holds

	// Versions 1 and 2 get no prefilling row: sent is the rows a FORWARD
	// carries and index the batch row of each (empty: all, in order).
	sent  []*rank.Seq
	index []int

	out    []byte
	in     []byte
	wide   []float32
	broken error // set by the first failed step: the stream is out of sync

	closeOnce sync.Once
	closeErr  error
}

var (
	_ rank.Executor         = (*Executor)(nil)
	_ rank.CapacityReporter = (*Executor)(nil)
)

// errHung marks a step that hit its deadline.
var errHung = errors.New("worker did not answer in time")

// Start starts (or connects to) the worker and completes the
// handshake. Every field HELLO_OK reports differently from cfg is refused,
// naming the field and both values. ctx bounds the start only.
func Start(ctx context.Context, cfg Config) (_ *Executor, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.defaults()
	w := &Executor{cfg: cfg, log: cfg.Logger.With("worker_rank", cfg.Rank)}
	defer func() {
		if err != nil {
			// A worker that failed its start gets no SHUTDOWN: kill it.
			w.broken = err
			w.kill()
			_ = w.Close()
			err = fmt.Errorf("rank %d: worker: %w", cfg.Rank, err)
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()

	if cfg.Logits {
		size := cfg.MaxBatch * cfg.Vocab * cfg.DType.Size()
		if w.shm, err = createShm(cfg.ShmDir, fmt.Sprintf("tpcoord-r%d-*.logits", cfg.Rank), size); err != nil {
			return nil, err
		}
	}
	if len(cfg.Command) > 0 {
		err = w.spawn(sctx)
	} else {
		var d net.Dialer
		w.conn, err = d.DialContext(sctx, "unix", cfg.Socket)
		if err != nil {
			err = fmt.Errorf("connect to worker-socket: %w", err)
		}
	}
	if err != nil {
		return nil, err
	}
	if err := w.handshake(sctx); err != nil {
		return nil, err
	}
	if w.shm != nil {
		// The worker opened the file before answering; unlinking now
		// leaves nothing behind in /dev/shm whatever happens later.
		if err := w.shm.unlink(); err != nil {
			return nil, fmt.Errorf("unlink %s: %w", w.shm.path, err)
		}
		w.shm.path = ""
	}
	w.log.Info("worker connected", "protocol", w.version, "pid", w.pid, "name", w.name, "dtype", cfg.DType.String(), "vocab", cfg.Vocab, "max_batch", cfg.MaxBatch,
		"kv_blocks", w.kv.Blocks, "block_size", w.kv.BlockSize, "max_model_len", w.kv.MaxModelLen)
	return w, nil
}

// spawn listens on a socket in a private directory, starts the command and
// accepts its connection. The process is reaped by a goroutine owned by
// the Executor; Close waits for it.
func (w *Executor) spawn(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "tpcoord-worker-")
	if err != nil {
		return err
	}
	w.dir = dir
	sock := filepath.Join(dir, "worker.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("listen for the worker: %w", err)
	}
	defer ln.Close()
	rankStr := strconv.Itoa(w.cfg.Rank)
	argv := make([]string, len(w.cfg.Command))
	for i, a := range w.cfg.Command {
		argv[i] = strings.NewReplacer("{socket}", sock, "{rank}", rankStr).Replace(a)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(append(os.Environ(), w.cfg.Env...), SocketEnv+"="+sock, RankEnv+"="+rankStr)
	w.tail = &outputTail{w: w.cfg.Stderr}
	cmd.Stdout, cmd.Stderr = w.cfg.Stdout, w.tail
	// A process the worker started that keeps its stderr open does not
	// hold up the reaping for long.
	cmd.WaitDelay = 2 * time.Second
	cmd.SysProcAttr = workerProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker-cmd %q: %w", argv[0], err)
	}
	w.cmd, w.pid, w.exited = cmd, cmd.Process.Pid, make(chan struct{})
	w.log.Info("worker process started", "pid", w.pid, "argv", argv)
	go func() {
		w.waitErr = cmd.Wait()
		close(w.exited)
		_ = ln.Close() // a worker that dies before connecting ends Accept
	}()
	stop := context.AfterFunc(ctx, func() { _ = ln.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn, err := ln.Accept()
	if err != nil {
		select {
		case <-w.exited:
			return fmt.Errorf("process %d exited before connecting: %s", w.pid, w.exitHow())
		default:
		}
		if ctx.Err() != nil {
			if errors.Is(context.Cause(ctx), context.DeadlineExceeded) {
				return fmt.Errorf("process %d did not connect within the start timeout %v (--worker-start-timeout): %w", w.pid, w.cfg.StartTimeout, context.Cause(ctx))
			}
			return fmt.Errorf("process %d did not connect: %w", w.pid, context.Cause(ctx))
		}
		return fmt.Errorf("accept the worker's connection: %w", err)
	}
	w.conn = conn
	return nil
}

func (w *Executor) handshake(ctx context.Context) error {
	want := hello{
		Version: w.cfg.MaxVersion, Rank: uint32(w.cfg.Rank), World: uint32(w.cfg.World),
		Vocab: uint32(w.cfg.Vocab), MaxBatch: uint32(w.cfg.MaxBatch), EOS: w.cfg.EOS,
		DType: w.cfg.DType, Order: nativeOrder, Logits: w.cfg.Logits, BlockSize: uint32(w.cfg.BlockSize),
	}
	if w.shm != nil {
		want.ShmPath, want.ShmSize = w.shm.path, uint64(len(w.shm.mem))
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = w.conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = w.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	typ, body, err := w.roundTrip(appendHello(w.out[:0], &want))
	if err != nil {
		err = w.explain(ctx, err)
		if errors.Is(err, errHung) || errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("handshake: %w: no HELLO_OK within the start timeout %v (--worker-start-timeout)", errHung, w.cfg.StartTimeout)
		}
		return fmt.Errorf("handshake: %w", err)
	}
	switch typ {
	case frameError:
		return fmt.Errorf("handshake refused by the worker: %s", workerMessage(body))
	case frameHelloOK:
	default:
		return fmt.Errorf("handshake: %w: %s in reply to HELLO", errGarbage, frameName(typ))
	}
	var got hello
	if err := decodeHelloOK(body, &got); err != nil {
		return fmt.Errorf("handshake: %w", err)
	}
	if err := helloMismatch(&want, &got); err != nil {
		return err
	}
	if w.pid == 0 {
		w.pid = int(got.PID)
	}
	w.name, w.version = got.Name, got.Version
	if got.Version >= ProtocolV3 {
		w.kv = rank.KVCapacity{BlockSize: int(got.BlockSize), Blocks: int(got.Blocks), MaxModelLen: int(got.MaxModelLen)}
		w.delta.chunked, w.delta.paged, w.delta.blockSize = true, got.Blocks > 0, got.BlockSize
	}
	_ = w.conn.SetDeadline(time.Time{})
	return nil
}

func (w *Executor) roundTrip(frame []byte) (uint16, []byte, error) {
	w.out = frame
	if _, err := w.conn.Write(frame); err != nil {
		return 0, nil, err
	}
	typ, body, err := readFrame(w.conn, w.in, maxReplyBody)
	w.in = body
	return typ, body, err
}

// explain turns an I/O error of a step or the handshake into what happened
// to the worker.
func (w *Executor) explain(ctx context.Context, err error) error {
	var ne net.Error
	switch {
	case ctx.Err() != nil:
		return context.Cause(ctx)
	case errors.As(err, &ne) && ne.Timeout():
		return errHung
	case errors.Is(err, errGarbage):
		return err
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || isConnReset(err):
		if w.exited != nil {
			// The process is most likely gone; say how, if it is reaped soon.
			t := time.NewTimer(time.Second)
			defer t.Stop()
			select {
			case <-w.exited:
				return fmt.Errorf("worker closed the connection and exited: %s", w.exitHow())
			case <-t.C:
			}
		}
		return fmt.Errorf("worker closed the connection: %w%s", err, w.tail.said())
	}
	return err
}

func isConnReset(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection reset") || strings.Contains(s, "broken pipe")
}

func exitString(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// exitHow is how the reaped process exited, with the last line it wrote.
func (w *Executor) exitHow() string { return exitString(w.waitErr) + w.tail.said() }

// logStopped logs the reaped process's end: at debug when its failure
// was already reported as an error (the start or a step failed), as a
// warning when it exited with an error after SHUTDOWN, else at info.
func (w *Executor) logStopped() {
	switch {
	case w.broken != nil:
		w.log.Debug("worker process stopped", "pid", w.pid, "exit", w.exitHow())
	case w.waitErr != nil:
		w.log.Warn("worker process exited with an error after SHUTDOWN", "pid", w.pid, "exit", w.exitHow())
	default:
		w.log.Info("worker process stopped", "pid", w.pid)
	}
}

// Vocab is the vocabulary size the worker confirmed at HELLO: the width
// of the logits rows it returns.
func (w *Executor) Vocab() int { return w.cfg.Vocab }

// PID is the worker process's ID (as the worker reported it when the agent
// connected to a running one).
func (w *Executor) PID() int { return w.pid }

// ProtocolVersion is the protocol version the connection speaks, as the
// worker answered HELLO.
func (w *Executor) ProtocolVersion() uint32 { return w.version }

// KVCapacity is the KV cache a version 3 worker reported in HELLO_OK;
// zero for a worker that answered version 1 or 2.
func (w *Executor) KVCapacity() rank.KVCapacity { return w.kv }

// Forward runs one step on the worker. Any failure (an ERROR reply, garbage,
// a closed connection, no answer within ForwardTimeout) names the rank and
// leaves the worker broken: every later Forward fails the same way.
//
// An empty batch sends nothing and returns no logits: rank 0 runs no
// forward pass for one, and every rank's worker must see the same FORWARDs
// (in version 2 the ids that left are finished in the next FORWARD).
func (w *Executor) Forward(ctx context.Context, b rank.Batch) ([]float32, error) {
	if w.broken != nil {
		return nil, w.broken
	}
	if len(b.Rows) == 0 {
		return nil, nil
	}
	logits, err := w.forward(ctx, b)
	if err != nil {
		w.broken = fmt.Errorf("rank %d: worker (pid %d): step %d: %w", w.cfg.Rank, w.pid, b.Step, err)
		_ = w.conn.Close()
		return nil, w.broken
	}
	return logits, nil
}

func (w *Executor) forward(ctx context.Context, b rank.Batch) ([]float32, error) {
	if len(b.Rows) > w.cfg.MaxBatch {
		return nil, fmt.Errorf("%d rows, the worker was set up for at most %d", len(b.Rows), w.cfg.MaxBatch)
	}
	rows, err := w.sendRows(b.Rows)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		// Every row is prefilling and the worker takes none: nothing to
		// run; rank 0 samples none of these rows.
		out := w.buffer(len(b.Rows))
		clear(out)
		return out, nil
	}
	_ = w.conn.SetDeadline(time.Now().Add(w.cfg.ForwardTimeout))
	stop := context.AfterFunc(ctx, func() { _ = w.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	frame, err := w.encodeForward(b.Epoch, b.Step, rows)
	if err != nil {
		return nil, err
	}
	typ, body, err := w.roundTrip(frame)
	if err != nil {
		err = w.explain(ctx, err)
		if errors.Is(err, errHung) {
			return nil, fmt.Errorf("%w: no reply within --forward-timeout %v", err, w.cfg.ForwardTimeout)
		}
		return nil, err
	}
	if err := w.checkForwardOK(typ, body, b.Step, len(rows)); err != nil {
		return nil, err
	}
	return w.logits(len(b.Rows), len(rows)), nil
}

// checkForwardOK checks the reply to a FORWARD of step with rows rows.
func (w *Executor) checkForwardOK(typ uint16, body []byte, step uint64, rows int) error {
	switch typ {
	case frameError:
		return fmt.Errorf("worker reported an error: %s", workerMessage(body))
	case frameForwardOK:
	default:
		return fmt.Errorf("%w: %s in reply to FORWARD", errGarbage, frameName(typ))
	}
	if len(body) != forwardOKSize {
		return fmt.Errorf("%w: FORWARD_OK of %d bytes (want %d)", errGarbage, len(body), forwardOKSize)
	}
	gotStep, gotRows := leUint64(body), leUint32(body[8:])
	want := uint32(0)
	if w.cfg.Logits {
		want = uint32(rows)
	}
	if gotStep != step || gotRows != want {
		return fmt.Errorf("%w: FORWARD_OK for step %d with %d rows, want step %d with %d rows", errGarbage, gotStep, gotRows, step, want)
	}
	return nil
}

// sendRows is the rows of the batch the FORWARD carries: all of them in
// version 3; versions 1 and 2 cannot take part of a sequence, so a
// prefilling row is left out until the step where it is fed whole (then
// w.index maps the FORWARD's rows to the batch's).
func (w *Executor) sendRows(rows []*rank.Seq) ([]*rank.Seq, error) {
	w.index = w.index[:0]
	if w.version >= ProtocolV3 {
		return rows, nil // planRow checks each row's Fed
	}
	w.sent = w.sent[:0]
	for i, r := range rows {
		if r.Fed > r.Len() {
			return nil, fmt.Errorf("sequence %d: Fed %d is beyond its %d tokens", r.ID, r.Fed, r.Len())
		}
		if !r.Prefilling() {
			w.sent = append(w.sent, r)
			w.index = append(w.index, i)
		}
	}
	if len(w.sent) == len(rows) {
		w.index = w.index[:0]
		return rows, nil
	}
	return w.sent, nil
}

// logits returns the batch's logits rows (rank 0) from the shared memory,
// where the worker wrote sent rows: in place (float32, every row sent) or
// in a buffer of ours, widened (float16, bfloat16) and, when rows were
// left out, moved to their batch rows, the others zero.
func (w *Executor) logits(rows, sent int) []float32 {
	if !w.cfg.Logits {
		return nil
	}
	v := w.cfg.Vocab
	if len(w.index) == 0 && w.cfg.DType == Float32 {
		return w.shm.float32s(rows * v)
	}
	out := w.buffer(rows)
	if len(w.index) == 0 {
		widen(out, w.shm.uint16s(rows*v), w.cfg.DType)
		return out
	}
	j := 0 // the FORWARD row of batch row i, if it was sent
	for i := range rows {
		dst := out[i*v : (i+1)*v]
		switch {
		case j == len(w.index) || w.index[j] != i:
			clear(dst)
			continue
		case w.cfg.DType == Float32:
			copy(dst, w.shm.float32s(sent * v)[j*v:])
		default:
			widen(dst, w.shm.uint16s(sent * v)[j*v:(j+1)*v], w.cfg.DType)
		}
		j++
	}
	return out
}

// buffer is rows logits rows of ours (nil on a rank without logits),
// reused from step to step; the caller fills them.
func (w *Executor) buffer(rows int) []float32 {
	if !w.cfg.Logits {
		return nil
	}
	n := rows * w.cfg.Vocab
	if cap(w.wide) < n {
		w.wide = make([]float32, n)
	}
	w.wide = w.wide[:n]
	return w.wide
}

// encodeForward encodes the FORWARD of rows in the connection's version
// into w.out (reused), advancing the delta state (versions 2 and 3).
func (w *Executor) encodeForward(epoch uint32, step uint64, rows []*rank.Seq) ([]byte, error) {
	if w.version == ProtocolV1 {
		w.out = appendForward(w.out[:0], step, rows)
		return w.out, nil
	}
	if err := w.delta.advance(epoch, step, rows); err != nil {
		return nil, err
	}
	w.out = appendForwardDelta(w.out[:0], w.version, step, w.delta.finished, rows, w.delta.plan)
	return w.out, nil
}

// kill ends the process now (used when it cannot be trusted to stop).
func (w *Executor) kill() {
	if w.cmd == nil {
		return
	}
	select {
	case <-w.exited:
	default:
		_ = w.cmd.Process.Kill()
	}
}

// Close asks the worker to shut down, kills it if it does not exit within
// StopTimeout (at once if it stopped answering), reaps it and releases the
// socket and the shared memory. It is idempotent.
func (w *Executor) Close() error {
	w.closeOnce.Do(func() {
		if w.conn != nil {
			if w.broken == nil {
				_ = w.conn.SetDeadline(time.Now().Add(time.Second))
				_, _ = w.conn.Write(appendFrame(nil, frameShutdown, nil))
			}
			_ = w.conn.Close()
		}
		if w.cmd != nil {
			if errors.Is(w.broken, errHung) {
				w.kill()
			}
			t := time.NewTimer(w.cfg.StopTimeout)
			select {
			case <-w.exited:
			case <-t.C:
				w.log.Warn("worker did not exit after SHUTDOWN; killing it", "pid", w.pid, "waited", w.cfg.StopTimeout)
				w.kill()
				<-w.exited
			}
			t.Stop()
			w.logStopped()
		}
		if w.shm != nil {
			if w.shm.path != "" {
				_ = w.shm.unlink()
			}
			w.closeErr = w.shm.close()
		}
		if w.dir != "" {
			_ = os.RemoveAll(w.dir)
		}
	})
	return w.closeErr
}
