//go:build !purego

#include "textflag.h"

// The AVX2 kernel of blockmax.go: per block of 256 values, four running
// VMAXPS maxima of 8 lanes, a flag for any NaN, and a reduction whose zero
// result is made +0 by adding +0.
//
// Go asm reverses Intel's operand order: VMAXPS Ym, Yx, Ym is Intel's
// VMAXPS ym, yx, ym, that is ym = (yx > ym) ? yx : ym per lane. A NaN in yx
// keeps ym, which is how the kernel ignores NaN.

// func blocksAVX2(v, out []float32) (nan bool)
TEXT ·blocksAVX2(SB), NOSPLIT, $0-49
	MOVQ v_base+0(FP), SI
	MOVQ out_base+24(FP), DI
	MOVQ out_len+32(FP), CX
	MOVL $0xff800000, AX
	MOVQ AX, X14
	VBROADCASTSS X14, Y14 // -Inf
	VXORPS Y13, Y13, Y13  // +0
	VXORPS Y15, Y15, Y15  // NaN lanes seen

block:
	TESTQ CX, CX
	JZ    done
	VMOVAPS Y14, Y0
	VMOVAPS Y14, Y1
	VMOVAPS Y14, Y2
	VMOVAPS Y14, Y3
	MOVQ    $8, DX // 8 × 32 tokens = one block

inner:
	VMOVUPS 0(SI), Y4
	VMOVUPS 32(SI), Y5
	VMOVUPS 64(SI), Y6
	VMOVUPS 96(SI), Y7
	VMAXPS  Y0, Y4, Y0
	VMAXPS  Y1, Y5, Y1
	VMAXPS  Y2, Y6, Y2
	VMAXPS  Y3, Y7, Y3
	VCMPPS  $3, Y5, Y4, Y8 // unordered: either is NaN
	VCMPPS  $3, Y7, Y6, Y9
	VORPS   Y8, Y15, Y15
	VORPS   Y9, Y15, Y15
	ADDQ    $128, SI
	DECQ    DX
	JNZ     inner

	// No NaN reached Y0..Y3, so the reduction order only matters for the
	// sign of a zero maximum, which adding +0 makes +0.
	VMAXPS       Y1, Y0, Y0
	VMAXPS       Y3, Y2, Y2
	VMAXPS       Y2, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VADDSS       X13, X0, X0
	VMOVSS       X0, 0(DI)
	ADDQ         $4, DI
	DECQ         CX
	JMP          block

done:
	VMOVMSKPS Y15, AX
	TESTL     AX, AX
	SETNE     nan+48(FP)
	VZEROUPPER
	RET
