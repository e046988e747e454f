package worker

import (
	"fmt"
	"unsafe"

	"github.com/tpcoord/tpcoord/internal/f16"
	"github.com/tpcoord/tpcoord/sampler"
)

// DType is the element type of the logits the worker writes.
type DType uint8

// Wire codes of the logits element types.
const (
	Float32  DType = 1
	Float16  DType = 2
	BFloat16 DType = 3
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Float16:
		return "float16"
	case BFloat16:
		return "bfloat16"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Size is the element size in bytes (0 for an unknown type).
func (d DType) Size() int {
	switch d {
	case Float32:
		return 4
	case Float16, BFloat16:
		return 2
	}
	return 0
}

// ParseDType accepts float32, float16 and bfloat16 (and f32, f16, bf16).
func ParseDType(s string) (DType, error) {
	d, err := sampler.ParseDtype(s)
	if err != nil {
		return 0, err
	}
	switch d {
	case sampler.Float16:
		return Float16, nil
	case sampler.BFloat16:
		return BFloat16, nil
	}
	return Float32, nil
}

// nativeOrder is this host's byte order, as HELLO states it.
var nativeOrder = func() uint8 {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return orderLittle
	}
	return orderBig
}()

func orderName(o uint8) string {
	switch o {
	case orderLittle:
		return "little-endian"
	case orderBig:
		return "big-endian"
	}
	return fmt.Sprintf("byte-order(%d)", o)
}

// Byte orders as HELLO states them.
const (
	orderLittle uint8 = 1
	orderBig    uint8 = 2
)

// widen converts native-order 16-bit logits from src into dst (len(dst)
// elements; exact).
func widen(dst []float32, src []uint16, dt DType) {
	if dt == BFloat16 {
		f16.WidenBFloat16(dst, src)
		return
	}
	f16.WidenHalf(dst, src)
}

// narrow rounds float32 logits to dt (ties to even), for workers.
func narrow(dst []uint16, src []float32, dt DType) {
	if dt == BFloat16 {
		f16.NarrowBFloat16(dst, src)
		return
	}
	f16.NarrowHalf(dst, src)
}
