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

var konsts = map[string]*konst{
	"twoM33":     {off: 0},
	"redOff":     {off: 4},
	"mantMask":   {off: 8},
	"sqrtHalf":   {off: 12},
	"bias":       {off: 16},
	"oneMinusS1": {off: 88}, // bits of 1-sqrt(1/2), plus one
	"sign":       {off: 24},
	"int1":       {off: 28},
	"one":        {off: 32, regOnly: true},
	"p0":         {off: 36}, "p1": {off: 40}, "p2": {off: 44}, "p3": {off: 48}, "p4": {off: 52},
	"p5": {off: 56}, "p6": {off: 60}, "p7": {off: 64}, "p8": {off: 68},
	"ln2Lo": {off: 72},
	"half":  {off: 76},
	"ln2Hi": {off: 80},
	// redOff + 0x80000000: adding it to the bits of log U both negates
	// (flips the sign bit of) log U into E and starts the range reduction
	// of E, exactly as the two separate integer operations would.
	"redOffSign": {off: 84},
	"mulA":       {off: 96, qword: true},
	"mulB":       {off: 104, qword: true},
}

// Preference order for the registers left after the work registers.
var regOrder = []string{"one", "sign", "redOff", "mantMask", "sqrtHalf", "bias",
	"p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p0", "ln2Hi", "ln2Lo", "half",
	"redOffSign", "oneMinusS1", "twoM33", "int1", "mulA", "mulB"}

// The kernel, one instruction per line. %N names work register N of the
// group (0..6); $name names a constant, which must be the first operand
// (after an immediate) unless it has a register. The selects
// sel(a, b, m) = m ? b : a of GumbelFromBits are VPTERNLOGD $0xd8, m, b, a;
// 2c+1 = 2(b^upper)+1 is computed as (b+b) ^ (upper|1), VPTERNLOGD $0x1e;
// m ? ^b : a is VPTERNLOGD $0x72, m, b, a.
const hashOps = `
VPSRLQ $30, %0, %1
VPXORQ %0, %1, %0
VPMULLQ $mulA, %0, %0
VPSRLQ $27, %0, %1
VPXORQ %1, %0, %0
VPMULLQ $mulB, %0, %0
VPSRLQ $31, %0, %1
VPXORQ %1, %0, %0`

// logOps leaves k·ln2 + log1p(f) in %3 for f in %0 and float k in %2, as
// logReduced does; it clobbers %1 and %4.
const logOps = `
VMULPS %0, %0, %1
VMULPS $p0, %0, %3
VADDPS $p1, %3, %3
VMULPS %0, %3, %3
VADDPS $p2, %3, %3
VMULPS %0, %3, %3
VADDPS $p3, %3, %3
VMULPS %0, %3, %3
VADDPS $p4, %3, %3
VMULPS %0, %3, %3
VADDPS $p5, %3, %3
VMULPS %0, %3, %3
VADDPS $p6, %3, %3
VMULPS %0, %3, %3
VADDPS $p7, %3, %3
VMULPS %0, %3, %3
VADDPS $p8, %3, %3
VMULPS %0, %3, %3
VMULPS %1, %3, %3
VMULPS $ln2Lo, %2, %4
VADDPS %4, %3, %3
VMULPS $half, %1, %4
VSUBPS %4, %3, %3
VADDPS %3, %0, %3
VMULPS $ln2Hi, %2, %4
VADDPS %4, %3, %3`

// gumbelOps maps the bits in %0 to the Gumbel value in %0, keeping five
// registers live: upper (%1) = all ones for b >= 2^31; q (%2); notBig (%3)
// = all ones when q <= 1-sqrt(1/2), the complement of GumbelFromBits' big;
// f2 (%4) = notBig ? -q : 1-2q; then f1 and k1 from q, and the selects
// f = upper ? f2 : f1 and k = upper ? ^notBig : k1 (= big, as -1 or 0).
var gumbelOps = `
VPSRAD $31, %0, %1
VPADDD %0, %0, %2
VPTERNLOGD $0x1e, $int1, %1, %2
VCVTUDQ2PS %2, %2
VMULPS $twoM33, %2, %2
VPSUBD $oneMinusS1, %2, %3
VPSRAD $31, %3, %3
VADDPS %2, %2, %4
VSUBPS %4, $one, %4
VPORD $sign, %2, %0
VPTERNLOGD $0xd8, %3, %0, %4
VPADDD $redOff, %2, %0
VPSRLD $23, %0, %2
VPSUBD $bias, %2, %2
VPANDD $mantMask, %0, %0
VPADDD $sqrtHalf, %0, %0
VSUBPS $one, %0, %0
VPTERNLOGD $0xd8, %1, %4, %0
VPTERNLOGD $0x72, %1, %3, %2
VCVTDQ2PS %2, %2` + logOps + `
VPADDD $redOffSign, %3, %0
VPSRLD $23, %0, %2
VPSUBD $bias, %2, %2
VCVTDQ2PS %2, %2
VPANDD $mantMask, %0, %0
VPADDD $sqrtHalf, %0, %0
VSUBPS $one, %0, %0` + logOps + `
VPXORD $sign, %3, %0`

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
		case strings.HasPrefix(a, "%"):
			parts[i] = fmt.Sprintf("Z%d", g*workRegs+int(a[1]-'0'))
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
	// Z registers: work registers of the groups, then the counter, then
	// constants in regOrder while registers last.
	next := G * workRegs
	ctr := fmt.Sprintf("Z%d", next)
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

	var b bytes.Buffer
	fmt.Fprintf(&b, "// Code generated by gen_amd64.go -groups %d; DO NOT EDIT.\n\n", G)
	b.WriteString("//go:build amd64 && !purego\n\n#include \"textflag.h\"\n\n")
	b.WriteString("// See gen_amd64.go: each line mirrors one operation of GumbelFromBits.\n\n")
	loadConsts := func() {
		for _, name := range regOrder {
			k := konsts[name]
			if k.reg == "" {
				continue
			}
			op := "VPBROADCASTD"
			if k.qword {
				op = "VPBROADCASTQ"
			}
			fmt.Fprintf(&b, "\t%s %d(R8), %s\n", op, k.off, k.reg)
		}
	}
	hash := lines(hashOps)
	gumbel := lines(gumbelOps)

	// fillAVX512: the input of each group is the counter vector, advanced
	// by 8 hashes (16 values) per group.
	b.WriteString("// func fillAVX512(ctr *[8]uint64, k *kernelConsts, dst *float32, n int)\n")
	b.WriteString("TEXT ·fillAVX512(SB), NOSPLIT, $0-32\n")
	b.WriteString("\tMOVQ ctr+0(FP), AX\n\tMOVQ k+8(FP), R8\n\tMOVQ dst+16(FP), DI\n\tMOVQ n+24(FP), CX\n")
	loadConsts()
	fmt.Fprintf(&b, "\tVMOVDQU64 (AX), %s\n", ctr)
	fillLoad := func(g int) string {
		return fmt.Sprintf("\tVMOVDQA64 %s, Z%d\n\tVPADDQ.BCST 112(R8), %s, %s\n", ctr, g*workRegs, ctr, ctr)
	}
	store := func(g int) string { return fmt.Sprintf("\tVMOVUPS Z%d, %d(DI)\n", g*workRegs, 64*g) }
	loop := func(prefix string, load func(int) string, emitHash bool, advance func(int) string) {
		fmt.Fprintf(&b, "\tCMPQ CX, $%d\n\tJLT %s_tail\n", 16*G, prefix)
		fmt.Fprintf(&b, "%s_loop:\n", prefix)
		for g := range G {
			b.WriteString(load(g))
		}
		if emitHash {
			emit(&b, hash, G)
		}
		emit(&b, gumbel, G)
		for g := range G {
			b.WriteString(store(g))
		}
		fmt.Fprintf(&b, "%s\tADDQ $%d, DI\n\tSUBQ $%d, CX\n\tCMPQ CX, $%d\n\tJGE %s_loop\n", advance(64*G), 64*G, 16*G, 16*G, prefix)
		fmt.Fprintf(&b, "%s_tail:\n\tCMPQ CX, $16\n\tJLT %s_done\n", prefix, prefix)
		b.WriteString(load(0))
		if emitHash {
			emit(&b, hash, 1)
		}
		emit(&b, gumbel, 1)
		b.WriteString(store(0))
		fmt.Fprintf(&b, "%s\tADDQ $64, DI\n\tSUBQ $16, CX\n\tJMP %s_tail\n", advance(64), prefix)
		fmt.Fprintf(&b, "%s_done:\n\tVZEROUPPER\n\tRET\n\n", prefix)
	}
	loop("fill", fillLoad, true, func(int) string { return "" })

	b.WriteString("// func gumbelBitsAVX512(k *kernelConsts, src *uint32, dst *float32, n int)\n")
	b.WriteString("TEXT ·gumbelBitsAVX512(SB), NOSPLIT, $0-32\n")
	b.WriteString("\tMOVQ k+0(FP), R8\n\tMOVQ src+8(FP), SI\n\tMOVQ dst+16(FP), DI\n\tMOVQ n+24(FP), CX\n")
	loadConsts()
	bitsLoad := func(g int) string { return fmt.Sprintf("\tVMOVDQU32 %d(SI), Z%d\n", 64*g, g*workRegs) }
	loop("bits", bitsLoad, false, func(n int) string { return fmt.Sprintf("\tADDQ $%d, SI\n", n) })

	if err := os.WriteFile(*out, b.Bytes(), 0o644); err != nil {
		log.Fatal(err)
	}
}
