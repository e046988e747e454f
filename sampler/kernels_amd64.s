//go:build !purego

#include "textflag.h"

// AVX2 versions of the kernels in kernels.go; see there for what each
// returns. Every float operation is a separate, rounded VMULPS / VADDPS /
// VSUBPS (never an FMA), in the order of the Go code, so each lane computes
// exactly what the Go kernel computes for that token.
//
// Go asm reverses Intel's operand order: VMAXPS Ym, Yx, Ym is Intel's
// VMAXPS ym, yx, ym, that is ym = (yx > ym) ? yx : ym per lane. A NaN in yx
// keeps ym, which is how the kernels ignore NaN.

// func scoreMaxAVX2(l, g []float32, invT, floor float32) float32
TEXT ·scoreMaxAVX2(SB), NOSPLIT, $0-60
	MOVQ         l_base+0(FP), SI
	MOVQ         l_len+8(FP), CX
	MOVQ         g_base+24(FP), DI
	VBROADCASTSS invT+48(FP), Y10
	VBROADCASTSS floor+52(FP), Y11
	MOVL         $0xff800000, AX
	MOVQ         AX, X14
	VBROADCASTSS X14, Y14 // -Inf
	VXORPS       Y13, Y13, Y13
	VMOVAPS      Y14, Y0
	VMOVAPS      Y14, Y1
	SHRQ         $3, CX   // groups of 8

pair:
	CMPQ      CX, $2
	JLT       single
	VMOVUPS   0(SI), Y2
	VMOVUPS   32(SI), Y3
	VMULPS    Y10, Y2, Y4     // l·invT
	VMULPS    Y10, Y3, Y5
	VADDPS    0(DI), Y4, Y4   // + g
	VADDPS    32(DI), Y5, Y5
	VCMPPS    $0x1d, Y11, Y2, Y6 // l >= floor
	VCMPPS    $0x1d, Y11, Y3, Y7
	VBLENDVPS Y6, Y4, Y14, Y4 // kept ? score : -Inf
	VBLENDVPS Y7, Y5, Y14, Y5
	VMAXPS    Y0, Y4, Y0
	VMAXPS    Y1, Y5, Y1
	ADDQ      $64, SI
	ADDQ      $64, DI
	SUBQ      $2, CX
	JMP       pair

single:
	TESTQ     CX, CX
	JZ        reduce
	VMOVUPS   0(SI), Y2
	VMULPS    Y10, Y2, Y4
	VADDPS    0(DI), Y4, Y4
	VCMPPS    $0x1d, Y11, Y2, Y6
	VBLENDVPS Y6, Y4, Y14, Y4
	VMAXPS    Y0, Y4, Y0

reduce:
	VMAXPS       Y1, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0x4e, X0, X1
	VMAXPS       X1, X0, X0
	VPERMILPS    $0xb1, X0, X1
	VMAXPS       X1, X0, X0
	VADDSS       X13, X0, X0
	VMOVSS       X0, ret+56(FP)
	VZEROUPPER
	RET

// expTable rows (see kernels_amd64.go), 32 bytes each.
#define LOG2E ·expTable+0(SB)
#define LN2HI ·expTable+32(SB)
#define LN2LO ·expTable+64(SB)
#define C720 ·expTable+96(SB)
#define C120 ·expTable+128(SB)
#define C24 ·expTable+160(SB)
#define C6 ·expTable+192(SB)
#define M86 ·expTable+224(SB)

// EXP8 handles the 8 tokens at off(SI): fastExp of l·invT - smax, summed
// as float64 into accLo (tokens 0-3) and accHi (4-7), and the bitmap of
// M - l < dh into the low 8 bits of bits.
// Registers: Y15 invT, Y14 smax, Y13 M, Y12 dh, Y10 0.5, Y9 1.0.
// The steps follow fastExp line by line: x = s - smax; valid = x >= -86;
// t = x·log2e; n = float32(int32(t - 0.5)), plus 1 if t - n >= 0.5;
// r = (x - n·ln2hi) - n·ln2lo; p = Horner in r; w = bits(p) + n<<23.
#define EXP8(off, accLo, accHi, bits) \
	VMOVUPS      off(SI), Y4      \
	VMULPS       Y15, Y4, Y5 \
	VSUBPS       Y14, Y5, Y5 \
	VCMPPS       $0x1d, M86, Y5, Y6 \
	VMULPS       LOG2E, Y5, Y7 \
	VSUBPS       Y10, Y7, Y8      \
	VCVTTPS2DQ   Y8, Y8           \
	VCVTDQ2PS    Y8, Y8 \
	VSUBPS       Y8, Y7, Y7       \
	VCMPPS       $0x1d, Y10, Y7, Y7 \
	VANDPS       Y9, Y7, Y7       \
	VADDPS       Y7, Y8, Y8 \
	VMULPS       LN2HI, Y8, Y7    \
	VSUBPS       Y7, Y5, Y5       \
	VMULPS       LN2LO, Y8, Y7    \
	VSUBPS       Y7, Y5, Y5 \
	VMULPS       C720, Y5, Y7     \
	VADDPS       C120, Y7, Y7     \
	VMULPS       Y5, Y7, Y7       \
	VADDPS       C24, Y7, Y7      \
	VMULPS       Y5, Y7, Y7       \
	VADDPS       C6, Y7, Y7       \
	VMULPS       Y5, Y7, Y7       \
	VADDPS       Y10, Y7, Y7      \
	VMULPS       Y5, Y7, Y7       \
	VADDPS       Y9, Y7, Y7       \
	VMULPS       Y5, Y7, Y7       \
	VADDPS       Y9, Y7, Y7 \
	VCVTTPS2DQ   Y8, Y8           \
	VPSLLD       $23, Y8, Y8      \
	VPADDD       Y8, Y7, Y7 \
	VANDPS       Y6, Y7, Y7 \
	VCVTPS2PD    X7, Y8           \
	VADDPD       Y8, accLo, accLo \
	VEXTRACTF128 $1, Y7, X7       \
	VCVTPS2PD    X7, Y8           \
	VADDPD       Y8, accHi, accHi \
	VSUBPS       Y4, Y13, Y5 \
	VCMPPS       $0x11, Y12, Y5, Y5 \
	VMOVMSKPS    Y5, bits

// func expSumAVX2(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16)
TEXT ·expSumAVX2(SB), NOSPLIT, $0-64
	MOVQ         l_base+0(FP), SI
	MOVQ         c+24(FP), BX
	MOVQ         acc+32(FP), R8
	MOVQ         mask_base+40(FP), DI
	MOVQ         mask_len+48(FP), CX
	VBROADCASTSS 0(BX), Y15  // invT
	VBROADCASTSS 4(BX), Y14  // smax
	VBROADCASTSS 8(BX), Y13  // M
	VBROADCASTSS 12(BX), Y12 // dh
	MOVL         $0x3f000000, AX
	MOVQ         AX, X10
	VBROADCASTSS X10, Y10    // 0.5
	MOVL         $0x3f800000, AX
	MOVQ         AX, X9
	VBROADCASTSS X9, Y9      // 1.0
	VMOVUPD      0(R8), Y0
	VMOVUPD      32(R8), Y1
	VMOVUPD      64(R8), Y2
	VMOVUPD      96(R8), Y3

loop:
	TESTQ CX, CX
	JZ    out
	EXP8(0, Y0, Y1, AX)
	EXP8(32, Y2, Y3, DX)
	SHLL  $8, DX
	ORL   DX, AX
	MOVW  AX, 0(DI)
	ADDQ  $64, SI
	ADDQ  $2, DI
	DECQ  CX
	JMP   loop

out:
	VMOVUPD Y0, 0(R8)
	VMOVUPD Y1, 32(R8)
	VMOVUPD Y2, 64(R8)
	VMOVUPD Y3, 96(R8)
	VZEROUPPER
	RET

// func expSumAVX512(l []float32, c *expSumArgs, acc *[16]float64, mask []uint16)
//
// expSumAVX2 with 16 lanes: one ZMM register is one mask word. Tokens 0-7
// of each group go to acc[0:8] (Z0) and 8-15 to acc[8:16] (Z1), as in Go.
TEXT ·expSumAVX512(SB), NOSPLIT, $0-64
	MOVQ         l_base+0(FP), SI
	MOVQ         c+24(FP), BX
	MOVQ         acc+32(FP), R8
	MOVQ         mask_base+40(FP), DI
	MOVQ         mask_len+48(FP), CX
	VBROADCASTSS 0(BX), Z16  // invT
	VBROADCASTSS 4(BX), Z17  // smax
	VBROADCASTSS 8(BX), Z18  // M
	VBROADCASTSS 12(BX), Z19 // dh
	VBROADCASTSS LOG2E, Z20
	VBROADCASTSS LN2HI, Z21
	VBROADCASTSS LN2LO, Z22
	VBROADCASTSS C720, Z23
	VBROADCASTSS C120, Z24
	VBROADCASTSS C24, Z25
	VBROADCASTSS C6, Z26
	VBROADCASTSS M86, Z27
	MOVL         $0x3f000000, AX
	MOVQ         AX, X2
	VBROADCASTSS X2, Z28     // 0.5
	MOVL         $0x3f800000, AX
	MOVQ         AX, X2
	VBROADCASTSS X2, Z29     // 1.0
	VMOVUPD      0(R8), Z0
	VMOVUPD      64(R8), Z1

loop512:
	TESTQ        CX, CX
	JZ           out512
	VMOVUPS      0(SI), Z4
	VMULPS       Z16, Z4, Z5        // s = l·invT
	VSUBPS       Z17, Z5, Z5        // x = s - smax
	VCMPPS       $0x1d, Z27, Z5, K1 // x >= -86
	VMULPS       Z20, Z5, Z7        // t
	VSUBPS       Z28, Z7, Z8
	VCVTTPS2DQ   Z8, Z8
	VCVTDQ2PS    Z8, Z8             // n
	VSUBPS       Z8, Z7, Z7
	VCMPPS       $0x1d, Z28, Z7, K2 // t - n >= 0.5
	VADDPS       Z29, Z8, K2, Z8    // n++
	VMULPS       Z21, Z8, Z7
	VSUBPS       Z7, Z5, Z5
	VMULPS       Z22, Z8, Z7
	VSUBPS       Z7, Z5, Z5         // r
	VMULPS       Z23, Z5, Z7
	VADDPS       Z24, Z7, Z7
	VMULPS       Z5, Z7, Z7
	VADDPS       Z25, Z7, Z7
	VMULPS       Z5, Z7, Z7
	VADDPS       Z26, Z7, Z7
	VMULPS       Z5, Z7, Z7
	VADDPS       Z28, Z7, Z7
	VMULPS       Z5, Z7, Z7
	VADDPS       Z29, Z7, Z7
	VMULPS       Z5, Z7, Z7
	VADDPS       Z29, Z7, Z7        // p
	VCVTTPS2DQ   Z8, Z8
	VPSLLD       $23, Z8, Z8
	VPADDD       Z8, Z7, Z7         // p·2^n
	VPXORD       Z6, Z6, Z6
	VMOVAPS      Z7, K1, Z6         // 0 unless x >= -86
	VCVTPS2PD    Y6, Z8
	VADDPD       Z8, Z0, Z0
	VEXTRACTF64X4 $1, Z6, Y6
	VCVTPS2PD    Y6, Z8
	VADDPD       Z8, Z1, Z1
	VSUBPS       Z4, Z18, Z5        // d = M - l
	VCMPPS       $0x11, Z19, Z5, K3 // d < dh
	KMOVW        K3, AX
	MOVW         AX, 0(DI)
	ADDQ         $64, SI
	ADDQ         $2, DI
	DECQ         CX
	JMP          loop512

out512:
	VMOVUPD Z0, 0(R8)
	VMOVUPD Z1, 64(R8)
	VZEROUPPER
	RET
