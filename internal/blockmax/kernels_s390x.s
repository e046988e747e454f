//go:build !purego

#include "textflag.h"

// The s390x vector kernel of kernels_s390x.go: per block of 256 values,
// eight running maxima of 4 lanes (VFMAXSB), reduced to one value and
// stored. Mode 1 of VFMAXSB is Java's Math.max, the builtin max's (the
// compiler's WFMAXSB): a NaN operand gives NaN, and -0 < +0. So the
// result is the block's maximum whatever the order of the lanes, or NaN
// for a block holding one; blocksS390X handles those and zero signs.

// func blocksVXE(v, out []float32)
TEXT ·blocksVXE(SB), NOSPLIT, $0-48
	MOVD v_base+0(FP), R1
	MOVD out_base+24(FP), R2
	MOVD out_len+32(FP), R3
	CMPBEQ R3, $0, done

block:
	VLM  (R1), V0, V7 // the first 32 values start the maxima
	ADD  $128, R1
	MOVD $7, R4       // 7 × 32 more: one block

inner:
	VLM     (R1), V8, V15
	VFMAXSB $1, V0, V8, V0
	VFMAXSB $1, V1, V9, V1
	VFMAXSB $1, V2, V10, V2
	VFMAXSB $1, V3, V11, V3
	VFMAXSB $1, V4, V12, V4
	VFMAXSB $1, V5, V13, V5
	VFMAXSB $1, V6, V14, V6
	VFMAXSB $1, V7, V15, V7
	ADD     $128, R1
	BRCTG   R4, inner

	VFMAXSB $1, V0, V1, V0
	VFMAXSB $1, V2, V3, V2
	VFMAXSB $1, V4, V5, V4
	VFMAXSB $1, V6, V7, V6
	VFMAXSB $1, V0, V2, V0
	VFMAXSB $1, V4, V6, V4
	VFMAXSB $1, V0, V4, V0
	VSLDB   $8, V0, V0, V1 // the lanes rotated by two
	VFMAXSB $1, V0, V1, V0
	VSLDB   $4, V0, V0, V1 // and by one: every lane holds the maximum
	VFMAXSB $1, V0, V1, V0
	VSTEF   $0, V0, (R2)
	ADD     $4, R2
	BRCTG   R3, block

done:
	RET
