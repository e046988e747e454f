package gateway

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/tpcoord/tpcoord/broadcast"
	"github.com/tpcoord/tpcoord/broadcast/api"
)

// byteTokenizer is a fake Tokenizer for the gateway's logic: token i < 256
// is byte i, 256 is a special end token that decodes to nothing.
type byteTokenizer struct{ template bool }

func (byteTokenizer) Name() string   { return "bytes" }
func (byteTokenizer) VocabSize() int { return 257 }
func (byteTokenizer) Encode(text string, _ bool) ([]int32, error) {
	ids := make([]int32, len(text))
	for i := range len(text) {
		ids[i] = int32(text[i])
	}
	return ids, nil
}

func (byteTokenizer) Decode(ids []int32) (string, error) {
	var b strings.Builder
	for _, id := range ids {
		if id < 0 || id > 256 {
			return "", errors.New("token out of range")
		}
		if id < 256 {
			b.WriteByte(byte(id))
		}
	}
	return b.String(), nil
}

func (byteTokenizer) NewDetokenizer() Detokenizer { return &byteStream{} }
func (t byteTokenizer) HasChatTemplate() bool     { return t.template }
func (t byteTokenizer) EncodeChat(msgs []ChatMessage, tools []ChatTool, gen, _ bool) ([]int32, error) {
	s, err := t.ApplyChatTemplate(msgs, gen)
	if err != nil {
		return nil, err
	}
	for _, tl := range tools {
		s = "<tool " + tl.Name + ">" + s
	}
	return t.Encode(s, false)
}

func (byteTokenizer) ApplyChatTemplate(msgs []ChatMessage, gen bool) (string, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<" + m.Role + ">" + m.Content + "\n")
		for _, c := range m.ToolCalls {
			args, _ := json.Marshal(c.Arguments)
			b.WriteString("<call " + c.ID + " " + c.Name + ">" + string(args) + "\n")
		}
	}
	if gen {
		b.WriteString("<assistant>")
	}
	return b.String(), nil
}

// byteStream releases the longest complete UTF-8 prefix of its bytes.
type byteStream struct{ buf []byte }

func (s *byteStream) Add(id int32) (string, error) {
	if id < 256 {
		s.buf = append(s.buf, byte(id))
	}
	n := len(s.buf)
	for n > 0 && !utf8.Valid(s.buf[:n]) {
		n--
	}
	out := string(s.buf[:n])
	s.buf = s.buf[n:]
	return out, nil
}

func (s *byteStream) Flush() string { out := string(s.buf); s.buf = nil; return out }

// fakeRank0 answers generate requests on an in-memory hub: each request
// streams the bytes of text as tokens (up to max_tokens), or fails with
// fail. It records the requests and the cancels it received.
type fakeRank0 struct {
	t    *testing.T
	tr   broadcast.Transport
	subj broadcast.Subjects
	text string
	fail *api.GenerateReply
	hold chan struct{} // if set, each token waits for a receive
	// lost, once closed, makes rank 0 forget every request: it sends
	// nothing more, and answers keepalives "not known" (as a rank 0
	// restarted without them would).
	lost chan struct{}
	// kv is what its status reports of its KV cache.
	kv          *api.KVStatus
	maxModelLen int
	vocab       int // the vocabulary its status reports
	// loseLogprobs, if > 0, loses the logprobs reply of output index
	// loseLogprobs-1 once (a NATS restart's lost reply).
	loseLogprobs int

	mu         sync.Mutex
	reqs       []api.GenerateRequest
	cancelled  map[string]bool
	keepalives int
	wg         sync.WaitGroup
	stop       chan struct{}
}

func startFakeRank0(t *testing.T, hub *broadcast.Hub, text string) *fakeRank0 {
	f := &fakeRank0{t: t, tr: hub.Connect(), subj: broadcast.Subjects{Prefix: "tpc", Job: "j"}, text: text,
		cancelled: map[string]bool{}, stop: make(chan struct{}), lost: make(chan struct{}), vocab: 257}
	sub := func(s string, fn func(*broadcast.Msg)) {
		if _, err := f.tr.Subscribe(s, fn); err != nil {
			t.Fatal(err)
		}
	}
	sub(f.subj.Generate(), f.onGenerate)
	sub(f.subj.Client(), f.onClient)
	sub(f.subj.Status(), func(m *broadcast.Msg) {
		b, _ := json.Marshal(api.RankStatus{Rank: 0, World: 1, State: "ready", Vocab: f.vocab, KV: f.kv, MaxModelLen: f.maxModelLen})
		_ = f.tr.Publish(&broadcast.Msg{Subject: m.Reply, Data: b})
	})
	t.Cleanup(func() { close(f.stop); f.wg.Wait() })
	return f
}

func (f *fakeRank0) onGenerate(m *broadcast.Msg) {
	var r api.GenerateRequest
	if err := json.Unmarshal(m.Data, &r); err != nil {
		f.t.Errorf("fake rank 0: %v", err)
		return
	}
	f.mu.Lock()
	f.reqs = append(f.reqs, r)
	f.mu.Unlock()
	f.wg.Go(func() { f.serve(m.Reply, r) })
}

func (f *fakeRank0) serve(reply string, r api.GenerateRequest) {
	send := func(v api.GenerateReply) {
		b, _ := json.Marshal(v)
		_ = f.tr.Publish(&broadcast.Msg{Subject: reply, Data: b})
	}
	if f.fail != nil {
		send(*f.fail)
		return
	}
	out := slices.Clone(r.ResumeTokenIDs) // continued after them
	for i := len(out); i < r.MaxTokens && i < len(f.text); i++ {
		if f.hold != nil {
			select {
			case <-f.hold:
			case <-f.stop:
				return
			case <-f.lost:
				return
			}
		}
		if f.isCancelled(reply) {
			send(api.GenerateReply{Done: true, FinishReason: api.FinishCancelled, Tokens: out, Error: "cancelled by the client"})
			return
		}
		tok := int32(f.text[i])
		out = append(out, tok)
		send(api.GenerateReply{Token: &tok, Index: i})
		if r.Logprobs != nil && !f.losesLogprobs(i) {
			send(api.GenerateReply{Index: i, Logprobs: &api.Logprobs{Token: tok, Logprob: -1, Rank: 1}})
		}
	}
	reason := api.FinishLength
	if len(out) < r.MaxTokens {
		reason = api.FinishStop
	}
	send(api.GenerateReply{Done: true, FinishReason: reason, Tokens: out, Timings: &api.Timings{QueueMs: 1}})
}

// losesLogprobs reports, once, whether index i's logprobs reply is lost.
func (f *fakeRank0) losesLogprobs(i int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.loseLogprobs == i+1 {
		f.loseLogprobs = 0
		return true
	}
	return false
}

func (f *fakeRank0) onClient(m *broadcast.Msg) {
	var c api.Message
	if json.Unmarshal(m.Data, &c) != nil {
		return
	}
	f.mu.Lock()
	if c.Op == "cancel" {
		f.cancelled[c.Reply] = true
	}
	if c.Op == "keepalive" {
		f.keepalives++
	}
	f.mu.Unlock()
	if m.Reply != "" {
		known := true
		select {
		case <-f.lost:
			known = false
		default:
		}
		b, _ := json.Marshal(api.KeepaliveAck{Known: known})
		_ = f.tr.Publish(&broadcast.Msg{Subject: m.Reply, Data: b})
	}
}

func (f *fakeRank0) isCancelled(tag string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cancelled[tag]
}

func (f *fakeRank0) cancels() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.cancelled)
}

func (f *fakeRank0) keepalivesSeen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.keepalives
}

func (f *fakeRank0) requests() []api.GenerateRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]api.GenerateRequest(nil), f.reqs...)
}

// newTestGateway returns a gateway on hub in front of a fake rank 0.
func newTestGateway(t *testing.T, text string, mod func(*Config), opts ...Option) (*Gateway, *fakeRank0) {
	hub := broadcast.NewHub()
	f := startFakeRank0(t, hub, text)
	cfg := DefaultConfig()
	cfg.Model = "m"
	if mod != nil {
		mod(&cfg)
	}
	g, err := New(cfg, hub.Connect(), f.subj, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g, f
}
