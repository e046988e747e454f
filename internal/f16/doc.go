// Package f16 owns the conversions between the two 16-bit float formats
// tpcoord handles and float32: IEEE 754 binary16 ("half", float16) and
// bfloat16 (the upper 16 bits of a binary32).
//
// Widening is exact. Narrowing rounds to nearest, ties to even; values too
// large for the format become ±Inf, NaN stays NaN (quiet), and binary16
// subnormals are produced and read. Scalar forms convert one value; the
// slice forms (WidenHalf, WidenBFloat16, NarrowHalf, NarrowBFloat16) are the
// hot loops, kept here so the scalar conversion inlines into them.
//
// The package works on bit patterns (uint16) and float32 values, never on
// bytes: byte order is the caller's (a row read from a file or from shared
// memory is decoded into uint16 first). It imports nothing but math.
package f16
