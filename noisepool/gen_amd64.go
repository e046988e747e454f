//go:build ignore

// gen_amd64 writes fill_amd64.s: the AVX-512 kernels, with the 16-lane
// computation of GumbelFromBits interleaved across several independent
// groups so that the long dependency chains of the two polynomial logs
// overlap. Run it with `go generate` in this directory.
//
// Every instruction mirrors one operation of GumbelFromBits (gumbel.go) in
// the same order: float32 products and sums are separate rounded
// instructions (no FMA), subtracting a constant is adding its negation
// (identical in IEEE arithmetic), and VCVTUDQ2PS rounds to nearest as Go's
// uint32 -> float32 conversion does.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
)

// A constant of kernelConsts (fill_amd64.go): its byte offset, whether it is
// a 64-bit lane, and whether an instruction uses it as the second source
// (where Go assembly cannot take a broadcast memory operand).
type konst struct {
	off     int
	qword   bool
	regOnly bool
	reg     string // assigned register, or "" for a broadcast operand
}

// Byte offsets of the six 32-entry tables of kernelConsts; "@name" in an
// instruction is the first half of a table (entries 0..15), "@name+" the
// second half, for VMOVUPS + VPERMT2PS lookups indexed by five bits.
var tables = map[string]int{"tT": 0, "tI": 128, "tNH": 256, "tC": 384, "tJ": 512, "tH": 640}

var konsts = map[string]*konst{
	"int1":   {off: 768},
	"twoM33": {off: 772},
	"negTwo": {off: 776},
	"one":    {off: 780, regOnly: true},
	"p0":     {off: 784},
	"p1":     {off: 788},
	"negLn2": {off: 792},
	"mulA":   {off: 800, qword: true},
	"mulB":   {off: 808, qword: true},
}

// stepOff is the offset of g·8·golden (g = 1..8), the counter step of g
// groups of 16 values.
func stepOff(g int) int { return 816 + 8*(g-1) }

// Preference order for the registers left after the work registers.
var regOrder = []string{"one"}

// The kernel, one instruction per line. %N names work register N of the
// group (0..4) and %k its mask register; $name names a constant, which must
// be the first operand (after an immediate) unless it has a register.
// VPTERNLOGD $0x1e computes 2c+1 = 2(b^upper)+1 as (b+b) ^ (upper|1).
const hashOps = `
VPSRLQ $30, %0, %1
VPXORQ %0, %1, %0
VPMULLQ $mulA, %0, %0
VPSRLQ $27, %0, %1
VPXORQ %1, %0, %0
VPMULLQ $mulB, %0, %0
VPSRLQ $31, %0, %1
VPXORQ %1, %0, %0`

// polyOps sets %3 = log2p1(%3), clobbering %1 and %2.
const polyOps = `
VMULPS %3, %3, %1
VMULPS $p1, %3, %2
VADDPS $p0, %2, %2
VMULPS %1, %2, %2
VADDPS %2, %3, %3`

// gumbelOps maps the bits in %0 to the Gumbel value in %0, as
// GumbelFromBits does: the mask register holds the upper-half lanes, where
// f = -2q replaces m-2 and q becomes 1-q rounded toward zero (merge-masked
// instructions); %4 holds the exponent k, then the table sums.
var gumbelOps = `
VPMOVD2M %0, %k
VPSRAD $31, %0, %1
VPADDD %0, %0, %2
VPTERNLOGD $0x1e, $int1, %1, %2
VCVTUDQ2PS %2, %2
VMULPS $twoM33, %2, %2
VGETMANTPS $0, %2, %3
VADDPS $negTwo, %3, %3
VMULPS $negTwo, %2, %k, %3
VSUBPS.RZ_SAE %2, $one, %k, %2
VGETEXPPS %2, %4
VPSRLD $18, %2, %2
VMOVUPS @tT, %0
VPERMT2PS @tT+, %2, %0
VSUBPS %0, %3, %3
VMOVUPS @tI, %0
VPERMT2PS @tI+, %2, %0
VMULPS %0, %3, %3
VMOVUPS @tNH, %0
VPERMT2PS @tNH+, %2, %0
VSUBPS %4, %0, %4` + polyOps + `
VSUBPS %3, %4, %0
VGETEXPPS %0, %4
VGETMANTPS $0, %0, %3
VPSRLD $18, %0, %2
VMOVUPS @tC, %0
VPERMT2PS @tC+, %2, %0
VSUBPS %0, %3, %3
VMOVUPS @tJ, %0
VPERMT2PS @tJ+, %2, %0
VMULPS %0, %3, %3
VMOVUPS @tH, %0
VPERMT2PS @tH+, %2, %0
VADDPS %0, %4, %4` + polyOps + `
VADDPS %3, %4, %4
VMULPS $negLn2, %4, %0`

const workRegs = 5

func lines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }

// emit writes ops for groups g = 0..n-1, interleaved instruction by instruction.
func emit(b *bytes.Buffer, ops []string, n int) {
	for _, op := range ops {
		for g := range n {
			b.WriteString("\t" + render(op, g) + "\n")
		}
	}
}

func render(op string, g int) string {
	mnem, args, _ := strings.Cut(op, " ")
	parts := strings.Split(args, ", ")
	for i, a := range parts {
		switch {
		case a == "%k":
			parts[i] = fmt.Sprintf("K%d", g+1)
		case strings.HasPrefix(a, "%"):
			parts[i] = fmt.Sprintf("Z%d", g*workRegs+int(a[1]-'0'))
		case strings.HasPrefix(a, "@"):
			name, second := strings.CutSuffix(a[1:], "+")
			off, ok := tables[name]
			if !ok {
				log.Fatalf("%s: no table %s", op, name)
			}
			if second {
				off += 64
			}
			parts[i] = fmt.Sprintf("%d(R8)", off)
		case strings.HasPrefix(a, "$") && konsts[a[1:]] != nil:
			k := konsts[a[1:]]
			if k.reg != "" {
				parts[i] = k.reg
				continue
			}
			afterImm := i == 1 && strings.HasPrefix(parts[0], "$") && konsts[parts[0][1:]] == nil
			if (i != 0 && !afterImm) || k.regOnly {
				log.Fatalf("%s: constant %s needs a register", op, a)
			}
			parts[i] = fmt.Sprintf("%d(R8)", k.off)
			mnem += ".BCST"
		}
	}
	return mnem + " " + strings.Join(parts, ", ")
}

func main() {
	groups := flag.Int("groups", 6, "16-lane groups interleaved per iteration")
	out := flag.String("o", "fill_amd64.s", "output file")
	flag.Parse()
	G := *groups
	if G < 1 || G > 7 || G*workRegs+2 > 32 {
		log.Fatalf("groups must be 1..6: one mask register and %d vector registers each", workRegs)
	}
	a := &asm{G: G, ctr: assignRegs(G), hash: lines(hashOps), gumbel: lines(gumbelOps)}
	fmt.Fprintf(&a.b, "// Code generated by gen_amd64.go -groups %d; DO NOT EDIT.\n\n", G)
	a.b.WriteString("//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	a.b.WriteString("// See gen_amd64.go: each line mirrors one operation of GumbelFromBits.\n\n")
	a.fillAVX512()
	a.gumbelBitsAVX512()
	if err := os.WriteFile(*out, a.b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}

// assignRegs gives the Z registers out for G groups: the work registers of
// the groups, then the counter (returned), then constants in regOrder
// while registers last.
func assignRegs(G int) (ctr string) {
	next := G * workRegs
	ctr = fmt.Sprintf("Z%d", next)
	next++
	for _, name := range regOrder {
		if next == 32 {
			break
		}
		konsts[name].reg = fmt.Sprintf("Z%d", next)
		next++
	}
	for name, k := range konsts {
		if k.regOnly && k.reg == "" {
			log.Fatalf("no register left for %s", name)
		}
	}
	return ctr
}

// asm accumulates the assembly text for G interleaved groups.
type asm struct {
	b            bytes.Buffer
	G            int
	ctr          string   // the counter register
	hash, gumbel []string // hashOps and gumbelOps, one instruction each
}

// loadConsts broadcasts the constants that have a register into it.
func (a *asm) loadConsts() {
	for _, name := range regOrder {
		k := konsts[name]
		if k.reg == "" {
			continue
		}
		op := "VPBROADCASTD"
		if k.qword {
			op = "VPBROADCASTQ"
		}
		fmt.Fprintf(&a.b, "\t%s %d(R8), %s\n", op, k.off, k.reg)
	}
}

// store writes group g's result (work register 0) to its 16 values of DI.
func (a *asm) store(g int) string {
	return fmt.Sprintf("\tVMOVUPS Z%d, %d(DI)\n", g*workRegs, 64*g)
}

// loop writes a kernel's body: G groups per iteration while 16·G values
// remain, then one group at a time. load(g) fills group g's input, the
// hash runs if emitHash, and advance(n) moves the input past n bytes of
// output.
func (a *asm) loop(prefix string, load func(int) string, emitHash bool, advance func(int) string) {
	b, G := &a.b, a.G
	fmt.Fprintf(b, "\tCMPQ CX, $%d\n\tJLT %s_tail\n", 16*G, prefix)
	fmt.Fprintf(b, "%s_loop:\n", prefix)
	for g := range G {
		b.WriteString(load(g))
	}
	if emitHash {
		emit(b, a.hash, G)
	}
	emit(b, a.gumbel, G)
	for g := range G {
		b.WriteString(a.store(g))
	}
	fmt.Fprintf(b, "%s\tADDQ $%d, DI\n\tSUBQ $%d, CX\n\tCMPQ CX, $%d\n\tJGE %s_loop\n", advance(64*G), 64*G, 16*G, 16*G, prefix)
	fmt.Fprintf(b, "%s_tail:\n\tCMPQ CX, $16\n\tJLT %s_done\n", prefix, prefix)
	b.WriteString(load(0))
	if emitHash {
		emit(b, a.hash, 1)
	}
	emit(b, a.gumbel, 1)
	b.WriteString(a.store(0))
	fmt.Fprintf(b, "%s\tADDQ $64, DI\n\tSUBQ $16, CX\n\tJMP %s_tail\n", advance(64), prefix)
	fmt.Fprintf(b, "%s_done:\n\tVZEROUPPER\n\tRET\n\n", prefix)
}

// fillAVX512: the input of each group is the counter vector, advanced by 8
// hashes (16 values) per group.
func (a *asm) fillAVX512() {
	a.b.WriteString("// func fillAVX512(ctr *[8]uint64, k *kernelConsts, dst *float32, n int)\n")
	a.b.WriteString("TEXT ·fillAVX512(SB), NOSPLIT, $0-32\n")
	a.b.WriteString("\tMOVQ ctr+0(FP), AX\n\tMOVQ k+8(FP), R8\n\tMOVQ dst+16(FP), DI\n\tMOVQ n+24(FP), CX\n")
	a.loadConsts()
	fmt.Fprintf(&a.b, "\tVMOVDQU64 (AX), %s\n", a.ctr)
	load := func(g int) string {
		if g == 0 {
			return fmt.Sprintf("\tVMOVDQA64 %s, Z0\n", a.ctr)
		}
		return fmt.Sprintf("\tVPADDQ.BCST %d(R8), %s, Z%d\n", stepOff(g), a.ctr, g*workRegs)
	}
	a.loop("fill", load, true, func(n int) string {
		return fmt.Sprintf("\tVPADDQ.BCST %d(R8), %s, %s\n", stepOff(n/64), a.ctr, a.ctr)
	})
}

// gumbelBitsAVX512: the input of each group is 16 values of random bits.
func (a *asm) gumbelBitsAVX512() {
	a.b.WriteString("// func gumbelBitsAVX512(k *kernelConsts, src *uint32, dst *float32, n int)\n")
	a.b.WriteString("TEXT ·gumbelBitsAVX512(SB), NOSPLIT, $0-32\n")
	a.b.WriteString("\tMOVQ k+0(FP), R8\n\tMOVQ src+8(FP), SI\n\tMOVQ dst+16(FP), DI\n\tMOVQ n+24(FP), CX\n")
	a.loadConsts()
	load := func(g int) string { return fmt.Sprintf("\tVMOVDQU32 %d(SI), Z%d\n", 64*g, g*workRegs) }
	a.loop("bits", load, false, func(n int) string { return fmt.Sprintf("\tADDQ $%d, SI\n", n) })
}
