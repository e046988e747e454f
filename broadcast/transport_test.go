package broadcast

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
)

func TestSubjects(t *testing.T) {
	s := Subjects{Prefix: "tpc", Job: "j1"}
	for _, tc := range []struct{ got, want string }{
		{s.Step(), "tpc.j1.step"},
		{s.Replay(), "tpc.j1.replay"},
		{s.Heartbeat(0), "tpc.j1.hb.0"},
		{s.Heartbeat(17), "tpc.j1.hb.17"},
		{s.Heartbeats(), "tpc.j1.hb.*"},
		{s.Generate(), "tpc.j1.generate"},
		{s.Status(), "tpc.j1.status"},
		{s.Control(), "tpc.j1.control"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
	for r := range 4 {
		if !SubjectMatch(s.Heartbeats(), s.Heartbeat(r)) {
			t.Errorf("Heartbeats() does not match Heartbeat(%d)", r)
		}
	}
	other := Subjects{Prefix: "tpc", Job: "j2"}
	if SubjectMatch(s.Heartbeats(), other.Heartbeat(1)) || SubjectMatch(s.Step(), other.Step()) {
		t.Error("one job's subjects match another job's")
	}
}

func TestValidateToken(t *testing.T) {
	for _, tc := range []struct {
		v  string
		ok bool
	}{
		{"tpc", true},
		{"job-42_a", true},
		{"ÜNICODE", true},
		{"", false},
		{"a.b", false},
		{".", false},
		{"*", false},
		{"a*", false},
		{">", false},
		{"a>", false},
		{"a b", false},
		{"a\tb", false},
		{"a\nb", false},
		{"a\r", false},
	} {
		err := ValidateToken("job", tc.v)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateToken(%q) = %v, want ok=%v", tc.v, err, tc.ok)
		}
		if err != nil && !strings.HasPrefix(err.Error(), "job: ") {
			t.Errorf("ValidateToken(%q) error %q does not name the field", tc.v, err)
		}
	}
}

func TestSubjectMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, subject string
		want             bool
	}{
		{"a.b.c", "a.b.c", true},
		{"a.b.c", "a.b.d", false},
		{"a.b.c", "a.b", false},
		{"a.b", "a.b.c", false},
		{"a", "a", true},
		{"a", "b", false},
		{"a.*.c", "a.b.c", true},
		{"a.*.c", "a.b.d", false},
		{"a.*", "a.b", true},
		{"a.*", "a.b.c", false},
		{"a.*", "a", false},
		{"*", "a", true},
		{"*", "a.b", false},
		{"*.*", "a.b", true},
		{"a.>", "a.b", true},
		{"a.>", "a.b.c.d", true},
		{"a.>", "a", false},
		{">", "a", true},
		{">", "a.b", true},
		{"a.>.c", "a.b.c", false}, // ">" only counts as the last token
		{"a.*.>", "a.b.c", true},
		{"a.*.>", "a.b", false},
		{"tpc.j.hb.*", "tpc.j.hb.3", true},
		{"tpc.j.hb.*", "tpc.j.step", false},
	} {
		if got := SubjectMatch(tc.pattern, tc.subject); got != tc.want {
			t.Errorf("SubjectMatch(%q, %q) = %v, want %v", tc.pattern, tc.subject, got, tc.want)
		}
	}
}

// recorder collects the messages a subscription receives.
type recorder struct {
	mu   sync.Mutex
	msgs []Msg
}

func (r *recorder) handle(m *Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, *m)
}

func (r *recorder) subjects() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.msgs {
		out = append(out, m.Subject)
	}
	return out
}

func mustSubscribe(t *testing.T, tr Transport, subject string, fn func(*Msg)) func() error {
	t.Helper()
	u, err := tr.Subscribe(subject, fn)
	if err != nil {
		t.Fatalf("Subscribe(%q): %v", subject, err)
	}
	return u
}

func TestHubDelivery(t *testing.T) {
	h := NewHub()
	pub, a, b := h.Connect(), h.Connect(), h.Connect()
	defer pub.Close()
	defer a.Close()
	defer b.Close()
	var exact, wild, all, own recorder
	mustSubscribe(t, a, "tpc.j.step", exact.handle)
	mustSubscribe(t, b, "tpc.j.hb.*", wild.handle)
	mustSubscribe(t, b, "tpc.>", all.handle)
	mustSubscribe(t, pub, "tpc.j.step", own.handle) // publishers hear themselves, as in NATS

	for _, s := range []string{"tpc.j.step", "tpc.j.hb.1", "tpc.j.hb.2", "other.j.step", "tpc.j.step"} {
		if err := pub.Publish(&Msg{Subject: s, Reply: "r", Header: map[string]string{"k": "v"}, Data: []byte(s)}); err != nil {
			t.Fatalf("Publish(%q): %v", s, err)
		}
	}
	for _, tc := range []struct {
		name string
		r    *recorder
		want []string
	}{
		{"exact", &exact, []string{"tpc.j.step", "tpc.j.step"}},
		{"wildcard", &wild, []string{"tpc.j.hb.1", "tpc.j.hb.2"}},
		{"full wildcard", &all, []string{"tpc.j.step", "tpc.j.hb.1", "tpc.j.hb.2", "tpc.j.step"}},
		{"own", &own, []string{"tpc.j.step", "tpc.j.step"}},
	} {
		if got := tc.r.subjects(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %v, want %v (in publish order)", tc.name, got, tc.want)
		}
	}
	m := exact.msgs[0]
	if string(m.Data) != "tpc.j.step" || m.Reply != "r" || m.Header["k"] != "v" {
		t.Errorf("delivered message %+v lost fields", m)
	}
}

// TestHubCopiesData: a handler owns its Data; the publisher reusing its
// buffer must not change what was delivered.
func TestHubCopiesData(t *testing.T) {
	h := NewHub()
	pub, sub := h.Connect(), h.Connect()
	defer pub.Close()
	defer sub.Close()
	var got [][]byte
	mustSubscribe(t, sub, "s", func(m *Msg) { got = append(got, m.Data) })
	buf := []byte("first")
	if err := pub.Publish(&Msg{Subject: "s", Data: buf}); err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXX")
	if string(got[0]) != "first" {
		t.Fatalf("delivered data changed to %q when the publisher reused its buffer", got[0])
	}
}

func TestHubUnsubscribe(t *testing.T) {
	h := NewHub()
	pub, sub := h.Connect(), h.Connect()
	defer pub.Close()
	defer sub.Close()
	var kept, dropped recorder
	mustSubscribe(t, sub, "s", kept.handle)
	unsub := mustSubscribe(t, sub, "s", dropped.handle)
	if err := pub.Publish(&Msg{Subject: "s"}); err != nil {
		t.Fatal(err)
	}
	if err := unsub(); err != nil {
		t.Fatalf("unsubscribe: %v", err)
	}
	if err := unsub(); err != nil {
		t.Fatalf("second unsubscribe: %v", err)
	}
	if err := pub.Publish(&Msg{Subject: "s"}); err != nil {
		t.Fatal(err)
	}
	if n := len(kept.subjects()); n != 2 {
		t.Errorf("remaining subscription got %d messages, want 2", n)
	}
	if n := len(dropped.subjects()); n != 1 {
		t.Errorf("unsubscribed handler got %d messages, want 1", n)
	}
}

func TestHubClosed(t *testing.T) {
	h := NewHub()
	pub, sub := h.Connect(), h.Connect()
	defer pub.Close()
	var got recorder
	mustSubscribe(t, sub, "s", got.handle)
	sub.Close()
	sub.Close() // idempotent

	if err := pub.Publish(&Msg{Subject: "s"}); err != nil {
		t.Fatalf("publishing to a closed subscriber's subject: %v", err)
	}
	if n := len(got.subjects()); n != 0 {
		t.Errorf("closed connection's subscription got %d messages", n)
	}
	if err := sub.Publish(&Msg{Subject: "s"}); !errors.Is(err, ErrClosed) {
		t.Errorf("Publish on closed conn: err = %v, want ErrClosed", err)
	}
	if _, err := sub.Subscribe("s", got.handle); !errors.Is(err, ErrClosed) {
		t.Errorf("Subscribe on closed conn: err = %v, want ErrClosed", err)
	}
	if err := sub.Flush(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush on closed conn: err = %v, want ErrClosed", err)
	}
	if err := pub.Flush(context.Background()); err != nil {
		t.Errorf("Flush on open conn: %v", err)
	}
}

func TestHubInboxesAreUnique(t *testing.T) {
	h := NewHub()
	a, b := h.Connect(), h.Connect()
	defer a.Close()
	defer b.Close()
	seen := map[string]bool{}
	for range 10 {
		for _, c := range []Transport{a, b} {
			in := c.NewInbox()
			if seen[in] {
				t.Fatalf("inbox %q handed out twice", in)
			}
			if err := ValidateToken("inbox", strings.ReplaceAll(in, ".", "")); err != nil {
				t.Fatalf("inbox %q: %v", in, err)
			}
			seen[in] = true
		}
	}
}

// A request nobody serves gets the server's "no responders" answer at once,
// as from NATS; a plain publish nobody hears is dropped silently.
func TestHubNoResponders(t *testing.T) {
	h := NewHub()
	c := h.Connect()
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := Request(ctx, c, "tpc.j.replay", []byte("x")); !errors.Is(err, ErrNoResponders) {
		t.Fatalf("request nobody serves: %v, want ErrNoResponders", err)
	}
	var got []*Msg
	if _, err := c.Subscribe("_INBOX.>", func(m *Msg) { got = append(got, m) }); err != nil {
		t.Fatal(err)
	}
	if err := c.Publish(&Msg{Subject: "tpc.j.step", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("a publish without a reply subject produced %d messages", len(got))
	}
	srv := h.Connect()
	defer srv.Close()
	if _, err := srv.Subscribe("tpc.j.replay", func(m *Msg) {
		_ = srv.Publish(&Msg{Subject: m.Reply, Data: []byte("re")})
	}); err != nil {
		t.Fatal(err)
	}
	rep, err := Request(ctx, c, "tpc.j.replay", []byte("x"))
	if err != nil || string(rep) != "re" {
		t.Fatalf("request once served: %q, %v", rep, err)
	}
}

// TestHubConcurrent exercises the hub from several goroutines (for -race):
// each publisher's messages arrive in its publish order.
func TestHubConcurrent(t *testing.T) {
	h := NewHub()
	sub := h.Connect()
	defer sub.Close()
	var mu sync.Mutex
	last := map[string]int{}
	outOfOrder := 0
	mustSubscribe(t, sub, "p.*", func(m *Msg) {
		mu.Lock()
		defer mu.Unlock()
		n := int(m.Data[0])
		if n != last[m.Subject]+1 {
			outOfOrder++
		}
		last[m.Subject] = n
	})
	var wg sync.WaitGroup
	for p := range 4 {
		wg.Go(func() {
			c := h.Connect()
			defer c.Close()
			for i := 1; i <= 100; i++ {
				if err := c.Publish(&Msg{Subject: "p." + string(rune('a'+p)), Data: []byte{byte(i)}}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if outOfOrder != 0 || len(last) != 4 {
		t.Fatalf("%d messages out of order, %d publishers seen", outOfOrder, len(last))
	}
}
