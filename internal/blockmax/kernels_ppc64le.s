//go:build !purego

#include "textflag.h"

// The ppc64le vector kernel of kernels_ppc64le.go: per block of 256
// values, eight running maxima of 4 lanes (VMAXFP, VMX), reduced to one
// value and stored. VMAXFP gives a NaN when either operand is a NaN, so
// the result is the block's maximum whatever the order of the lanes, or
// NaN for a block holding one. In the VMX non-Java mode (VSCR[NJ], which
// Linux sets) denormal operands count as zeros, so a block whose maximum
// is a denormal or a zero comes out as a zero; blocksPPC64LE redoes those
// blocks, and the NaN ones.
//
// Go's assembler has no VMAXFP: it is encoded here (VX-form, primary
// opcode 4, extended opcode 1034; the operands are VR numbers, V0-V31).
#define VMAXFP(vrt, vra, vrb) WORD $(0x1000040A | (vrt)<<21 | (vra)<<16 | (vrb)<<11)

// LOAD32 loads the 32 values at R3 into eight vector registers (R6-R12
// hold the byte offsets 16-112).
#define LOAD32(a, b, c, d, e, f, g, h) \
	LXVW4X (R0)(R3), a  \
	LXVW4X (R6)(R3), b  \
	LXVW4X (R7)(R3), c  \
	LXVW4X (R8)(R3), d  \
	LXVW4X (R9)(R3), e  \
	LXVW4X (R10)(R3), f \
	LXVW4X (R11)(R3), g \
	LXVW4X (R12)(R3), h

// func blocksVMX(v, out []float32)
TEXT ·blocksVMX(SB), NOSPLIT, $0-48
	MOVD v_base+0(FP), R3
	MOVD out_base+24(FP), R4
	MOVD out_len+32(FP), R5
	CMP  R5, $0
	BEQ  done
	MOVD $16, R6  // the byte offsets of a group's vectors 1-7
	MOVD $32, R7
	MOVD $48, R8
	MOVD $64, R9
	MOVD $80, R10
	MOVD $96, R11
	MOVD $112, R12

block:
	LOAD32(VS32, VS33, VS34, VS35, VS36, VS37, VS38, VS39) // the first 32 values start the maxima
	ADD    $128, R3
	MOVD   $7, R14        // 7 × 32 more: one block
	MOVD   R14, CTR

inner:
	LOAD32(VS40, VS41, VS42, VS43, VS44, VS45, VS46, VS47)
	VMAXFP(0, 0, 8)
	VMAXFP(1, 1, 9)
	VMAXFP(2, 2, 10)
	VMAXFP(3, 3, 11)
	VMAXFP(4, 4, 12)
	VMAXFP(5, 5, 13)
	VMAXFP(6, 6, 14)
	VMAXFP(7, 7, 15)
	ADD    $128, R3
	BDNZ   inner

	VMAXFP(0, 0, 1)
	VMAXFP(2, 2, 3)
	VMAXFP(4, 4, 5)
	VMAXFP(6, 6, 7)
	VMAXFP(0, 0, 2)
	VMAXFP(4, 4, 6)
	VMAXFP(0, 0, 4)
	VSLDOI  $8, V0, V0, V1 // the lanes rotated by two
	VMAXFP(0, 0, 1)
	VSLDOI  $4, V0, V0, V1 // and by one: every lane holds the maximum
	VMAXFP(0, 0, 1)
	MFVSRWZ VS32, R15
	MOVW    R15, (R4)
	ADD     $4, R4
	ADD     $-1, R5
	CMP     R5, $0
	BNE     block

done:
	RET
