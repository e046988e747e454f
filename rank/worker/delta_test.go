package worker

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/rank"
)

func seq(id uint64, prompt, output int) *rank.Seq {
	return &rank.Seq{ID: id, Prompt: make([]int32, prompt), Output: make([]int32, output), Fed: prompt + output}
}

// grow appends token t to r, fed whole, as the mirror applies a step.
func grow(r *rank.Seq, t int32) {
	r.Output = append(r.Output, t)
	r.Fed = r.Len()
}

func advance(d *delta, b rank.Batch) error { return d.advance(b.Epoch, b.Step, b.Rows) }

func whole(from, to uint32) rowPlan { return rowPlan{known: from > 0, from: from, to: to} }

// TestDeltaPlans: rows join (NEW, whole), go on (from the count sent),
// leave (finished next time), and a new epoch, or a gap in the steps (a
// step with no rows ran between), finishes every held id and sends every
// row whole.
func TestDeltaPlans(t *testing.T) {
	var d delta
	a, b, c := seq(30, 3, 0), seq(10, 2, 4), seq(20, 5, 0)
	steps := []struct {
		batch    rank.Batch
		grow     []*rank.Seq // get one token before the step
		finished []uint64
		plan     []rowPlan
	}{
		{rank.Batch{Epoch: 1, Step: 1, Rows: []*rank.Seq{a, b}}, nil, nil, []rowPlan{whole(0, 3), whole(0, 6)}},
		{rank.Batch{Epoch: 1, Step: 2, Rows: []*rank.Seq{a, b, c}}, []*rank.Seq{a, b}, nil,
			[]rowPlan{whole(3, 4), whole(6, 7), whole(0, 5)}},
		{rank.Batch{Epoch: 1, Step: 3, Rows: []*rank.Seq{c, a}}, []*rank.Seq{a, b, c}, []uint64{10},
			[]rowPlan{whole(5, 6), whole(4, 5)}},
		{rank.Batch{Epoch: 1, Step: 4, Rows: []*rank.Seq{c}}, []*rank.Seq{c}, []uint64{30},
			[]rowPlan{whole(6, 7)}},
		{rank.Batch{Epoch: 1, Step: 6, Rows: []*rank.Seq{c}}, []*rank.Seq{c}, []uint64{20}, []rowPlan{whole(0, 8)}},
		{rank.Batch{Epoch: 2, Step: 1, Rows: []*rank.Seq{b, c}}, []*rank.Seq{c}, []uint64{20}, []rowPlan{whole(0, 8), whole(0, 9)}},
		{rank.Batch{Epoch: 2, Step: 2, Rows: []*rank.Seq{b, c}}, []*rank.Seq{b, c}, nil,
			[]rowPlan{whole(8, 9), whole(9, 10)}},
	}
	for i, st := range steps {
		for _, r := range st.grow {
			grow(r, int32(i))
		}
		if err := advance(&d, st.batch); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if !slices.Equal(d.finished, st.finished) || !reflect.DeepEqual(d.plan, st.plan) {
			t.Errorf("step %d: finished %v plan %+v, want %v %+v", i, d.finished, d.plan, st.finished, st.plan)
		}
	}
}

func TestDeltaRefuses(t *testing.T) {
	cases := []struct {
		name string
		rows []*rank.Seq
		want string
	}{
		{"duplicate new", []*rank.Seq{seq(1, 2, 0), seq(5, 1, 0), seq(5, 1, 0)}, "sequence 5 is in the batch twice"},
		{"duplicate known", []*rank.Seq{seq(7, 3, 1), seq(7, 3, 1)}, "sequence 7 is in the batch twice"},
		{"no new token", []*rank.Seq{seq(7, 2, 1)}, "sequence 7 has 3 tokens and the worker holds 3"},
		{"empty sequence", []*rank.Seq{seq(9, 0, 0)}, "sequence 9 has 0 tokens"},
	}
	for _, tc := range cases {
		var d delta
		if err := d.advance(1, 1, []*rank.Seq{seq(7, 2, 1)}); err != nil {
			t.Fatal(err)
		}
		err := d.advance(1, 2, tc.rows)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
}

// TestEncodeForwardAllocatesNothing in steady state: rows going on, one
// joining and one leaving per step, after the buffers have grown.
func TestEncodeForwardAllocatesNothing(t *testing.T) {
	w := &Executor{version: ProtocolV2}
	rows := make([]*rank.Seq, 32)
	for i := range rows {
		rows[i] = seq(uint64(i), 100, 0)
		rows[i].Output = make([]int32, 0, 1<<12)
	}
	spare := seq(1000, 100, 0)
	spare.Output = make([]int32, 0, 1<<12)
	step := uint64(0)
	run := func() {
		step++
		for _, r := range rows {
			grow(r, 1)
		}
		// Swap a row out for the spare: one leaves, one joins.
		i := int(step % 32)
		rows[i], spare = spare, rows[i]
		spare.Output = spare.Output[:0]
		if _, err := w.encodeForward(1, step, rows); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		run()
	}
	if allocs := testing.AllocsPerRun(1000, run); allocs != 0 {
		t.Errorf("%v allocations per step", allocs)
	}
}
