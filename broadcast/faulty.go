package broadcast

import (
	"math/rand/v2"
	"sync"
)

// Faults says how often a Faulty transport misbehaves, per delivered
// message on the subjects it applies to.
type Faults struct {
	Drop      float64 // message never delivered
	Duplicate float64 // delivered twice
	Reorder   float64 // held back and delivered after the next message
	// Subjects the faults apply to (NATS patterns); empty means all.
	Subjects []string
}

// Faulty wraps a Transport and injects drops, duplicates and reordering
// into what its subscriptions receive, reproducibly from a seed. It is the
// test double for core NATS's at-most-once delivery.
type Faulty struct {
	Transport
	faults Faults

	mu   sync.Mutex
	rng  *rand.Rand
	held map[string]*Msg // per subscription pattern: a message held back
	n    FaultCounts
}

// FaultCounts counts the faults injected.
type FaultCounts struct{ Dropped, Duplicated, Reordered int }

var _ Transport = (*Faulty)(nil)

// NewFaulty wraps tr.
func NewFaulty(tr Transport, f Faults, seed uint64) *Faulty {
	return &Faulty{Transport: tr, faults: f, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), held: map[string]*Msg{}}
}

// Counts returns the faults injected so far.
func (f *Faulty) Counts() FaultCounts {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

func (f *Faulty) applies(subject string) bool {
	if len(f.faults.Subjects) == 0 {
		return true
	}
	for _, p := range f.faults.Subjects {
		if SubjectMatch(p, subject) {
			return true
		}
	}
	return false
}

// Subscribe subscribes on the wrapped transport and injects the faults into
// what it delivers on the subjects the faults apply to.
func (f *Faulty) Subscribe(subject string, fn func(*Msg)) (func() error, error) {
	return f.Transport.Subscribe(subject, func(m *Msg) {
		if !f.applies(m.Subject) {
			fn(m)
			return
		}
		var deliver []*Msg
		f.mu.Lock()
		cp := *m
		cp.Data = append([]byte(nil), m.Data...)
		switch x := f.rng.Float64(); {
		case x < f.faults.Drop:
			f.n.Dropped++
		case x < f.faults.Drop+f.faults.Duplicate:
			f.n.Duplicated++
			deliver = append(deliver, &cp, &cp)
		case x < f.faults.Drop+f.faults.Duplicate+f.faults.Reorder && f.held[subject] == nil:
			f.n.Reordered++
			f.held[subject] = &cp
		default:
			deliver = append(deliver, &cp)
		}
		if h := f.held[subject]; h != nil && len(deliver) > 0 {
			deliver = append(deliver, h)
			delete(f.held, subject)
		}
		f.mu.Unlock()
		for _, d := range deliver {
			fn(d)
		}
	})
}
