//go:build !agentonly

package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tpcoord/tpcoord/internal/f16"
)

func runCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newSampleCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func npyBytes(descr, shape string, payload []byte) []byte {
	hdr := fmt.Sprintf("{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape)
	pad := 64 - (10+len(hdr)+1)%64
	hdr += strings.Repeat(" ", pad) + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	binary.Write(&b, binary.LittleEndian, uint16(len(hdr)))
	b.WriteString(hdr)
	b.Write(payload)
	return b.Bytes()
}

func f32Bytes(l []float32) []byte {
	b := make([]byte, 4*len(l))
	for i, v := range l {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func u16Bytes(l []float32, conv func(float32) uint16) []byte {
	b := make([]byte, 2*len(l))
	for i, v := range l {
		binary.LittleEndian.PutUint16(b[2*i:], conv(v))
	}
	return b
}

// testLogits: token 2 is masked, token 5 dominates.
var testLogits = []float32{0, 1, float32(math.Inf(-1)), 0.5, -1, 3, 0.25, -2}

func TestSampleFormats(t *testing.T) {
	files := map[string][]string{
		"raw f32":  {"--logits", writeFile(t, "l.f32", f32Bytes(testLogits))},
		"raw f16":  {"--logits", writeFile(t, "l.f16", u16Bytes(testLogits, f16.Float32ToHalf)), "--dtype", "f16"},
		"raw bf16": {"--logits", writeFile(t, "l.bf16", u16Bytes(testLogits, f16.Float32ToBFloat16)), "--dtype", "bf16"},
		"npy f4":   {"--logits", writeFile(t, "l.npy", npyBytes("<f4", "(8,)", f32Bytes(testLogits)))},
		"npy 1xV":  {"--logits", writeFile(t, "m.npy", npyBytes("<f2", "(1, 8)", u16Bytes(testLogits, f16.Float32ToHalf)))},
	}
	for name, args := range files {
		out, err := runCmd(t, append(args, "--draws", "2000", "--seed", "3", "--json")...)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got struct{ Counts map[string]int }
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("%s: bad JSON %q: %v", name, out, err)
		}
		total := 0
		for _, n := range got.Counts {
			total += n
		}
		if total != 2000 || got.Counts["2"] != 0 {
			t.Fatalf("%s: counts %v", name, got.Counts)
		}
		// p(5) = e^3 / sum ≈ 0.68; 2000 draws put it within ±0.1 with
		// false-failure probability < 1e-9.
		if f := float64(got.Counts["5"]) / 2000; f < 0.58 || f > 0.78 {
			t.Fatalf("%s: token 5 share %.3f, want ~0.68 (%v)", name, f, got.Counts)
		}
		// The same seed reproduces the counts exactly.
		again, _ := runCmd(t, append(args, "--draws", "2000", "--seed", "3", "--json")...)
		if again != out {
			t.Fatalf("%s: not reproducible", name)
		}
	}
}

func TestSampleParamsAndTable(t *testing.T) {
	f := writeFile(t, "l.f32", f32Bytes(testLogits))
	out, err := runCmd(t, "--logits", f, "--draws", "500", "--temperature", "0", "--json")
	if err != nil || out != `{"counts":{"5":500}}`+"\n" {
		t.Fatalf("greedy: %q %v", out, err)
	}
	out, err = runCmd(t, "--logits", f, "--draws", "500", "--top-k", "2", "--json")
	if err != nil || strings.Contains(out, `"0"`) || !strings.Contains(out, `"1"`) {
		t.Fatalf("top-k 2: %q %v", out, err)
	}
	out, err = runCmd(t, "--logits", f, "--draws", "500", "--top-p", "0.5", "--min-p", "0.01")
	if err != nil || !strings.Contains(out, "500 draws from 8 tokens") || !strings.Contains(out, "100.000%") {
		t.Fatalf("table: %q %v", out, err)
	}
}

func TestSampleErrors(t *testing.T) {
	f := writeFile(t, "l.f32", f32Bytes(testLogits))
	nan := writeFile(t, "nan.f32", f32Bytes([]float32{1, float32(math.NaN())}))
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"--draws", "5"}, "logits: required"},
		{[]string{"--logits", filepath.Join(t.TempDir(), "missing")}, "logits: open"},
		{[]string{"--logits", f, "--dtype", "f64"}, "dtype:"},
		{[]string{"--logits", f, "--draws", "0"}, "draws:"},
		{[]string{"--logits", f, "--top-k", "99"}, "top-k:"},
		{[]string{"--logits", f, "--top-p", "1.5"}, "top-p:"},
		{[]string{"--logits", f, "--min-p", "-1"}, "min-p:"},
		{[]string{"--logits", f, "--temperature", "-1"}, "temperature:"},
		{[]string{"--logits", writeFile(t, "odd", []byte{1, 2, 3})}, "not a whole number"},
		{[]string{"--logits", nan}, "NaN at token 1"},
		{[]string{"--logits", writeFile(t, "b.npy", npyBytes("<f8", "(1,)", make([]byte, 8)))}, `dtype "<f8" not supported`},
		{[]string{"--logits", writeFile(t, "c.npy", npyBytes("<f4", "(2, 4)", make([]byte, 32)))}, "not one row"},
		{[]string{"--logits", writeFile(t, "d.npy", npyBytes("<f4", "(5,)", make([]byte, 16)))}, "shape says 5 values"},
		{[]string{"--logits", writeFile(t, "e.npy", npyBytes("<f4", "(4,)", make([]byte, 16))), "--dtype", "bf16"}, "--dtype is bf16"},
	}
	for _, c := range cases {
		_, err := runCmd(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%v: got %v, want error containing %q", c.args, err, c.want)
		}
	}
}
