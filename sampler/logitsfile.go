package sampler

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// npyMagic starts every .npy file.
var npyMagic = []byte("\x93NUMPY")

// DecodeLogits decodes one logits row from a file's bytes into a Row with
// Logits, or Logits16 and Dtype, set (the other fields are left zero).
//
// A file starting with the .npy magic is parsed as .npy: little-endian
// float32 ("<f4") or float16 ("<f2"), C order, shape (V,) or (1, V); when
// dtypeSet, dtype must agree with the header. Anything else is raw
// little-endian values of dtype (float32 unless dtypeSet); bfloat16 is raw
// only, as .npy has no bfloat16 type.
func DecodeLogits(data []byte, dtype Dtype, dtypeSet bool) (Row, error) {
	var row Row
	if bytes.HasPrefix(data, npyMagic) {
		hdrType, payload, err := parseNpy(data)
		if err != nil {
			return row, err
		}
		if dtypeSet && dtype != hdrType {
			return row, fmt.Errorf("npy: file holds %v but --dtype is %v", hdrType, dtype)
		}
		dtype, data = hdrType, payload
	} else if !dtypeSet {
		dtype = Float32
	}
	size := 4
	if dtype != Float32 {
		size = 2
	}
	if len(data) == 0 {
		return row, fmt.Errorf("logits: no values")
	}
	if len(data)%size != 0 {
		return row, fmt.Errorf("logits: %d bytes is not a whole number of %v values (%d bytes each)", len(data), dtype, size)
	}
	row.Dtype = dtype
	n := len(data) / size
	if dtype == Float32 {
		row.Logits = make([]float32, n)
		for i := range row.Logits {
			row.Logits[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:]))
		}
		return row, nil
	}
	row.Logits16 = make([]uint16, n)
	for i := range row.Logits16 {
		row.Logits16[i] = binary.LittleEndian.Uint16(data[2*i:])
	}
	return row, nil
}

var (
	npyDescr   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	npyFortran = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	npyShape   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// parseNpy returns the dtype and the values' bytes of a one-row .npy file.
func parseNpy(data []byte) (Dtype, []byte, error) {
	hdr, payload, err := npyHeader(data)
	if err != nil {
		return 0, nil, err
	}
	m := npyDescr.FindStringSubmatch(hdr)
	if m == nil {
		return 0, nil, fmt.Errorf("npy: header has no descr: %q", hdr)
	}
	var dt Dtype
	switch m[1] {
	case "<f4":
		dt = Float32
	case "<f2":
		dt = Float16
	default:
		return 0, nil, fmt.Errorf("npy: dtype %q not supported (want '<f4' or '<f2'; store bfloat16 as raw)", m[1])
	}
	if f := npyFortran.FindStringSubmatch(hdr); f != nil && f[1] == "True" {
		return 0, nil, fmt.Errorf("npy: fortran_order arrays are not supported")
	}
	v, err := npyRowLength(hdr)
	if err != nil {
		return 0, nil, err
	}
	size := 4
	if dt == Float16 {
		size = 2
	}
	if len(payload) != v*size {
		return 0, nil, fmt.Errorf("npy: shape says %d values but the file holds %d bytes of data", v, len(payload))
	}
	return dt, payload, nil
}

// npyHeader splits a .npy file (format version 1 to 3) into its header
// dict text and the bytes after it.
func npyHeader(data []byte) (string, []byte, error) {
	if len(data) < 10 {
		return "", nil, fmt.Errorf("npy: truncated header")
	}
	major := data[6]
	var hlen, off int
	switch major {
	case 1:
		hlen, off = int(binary.LittleEndian.Uint16(data[8:])), 10
	case 2, 3:
		if len(data) < 12 {
			return "", nil, fmt.Errorf("npy: truncated header")
		}
		hlen, off = int(binary.LittleEndian.Uint32(data[8:])), 12
	default:
		return "", nil, fmt.Errorf("npy: unsupported format version %d", major)
	}
	if off+hlen > len(data) {
		return "", nil, fmt.Errorf("npy: header length %d exceeds file size %d", hlen, len(data))
	}
	return string(data[off : off+hlen]), data[off+hlen:], nil
}

// npyRowLength returns V for a header whose shape is (V,) or (1, V).
func npyRowLength(hdr string) (int, error) {
	sm := npyShape.FindStringSubmatch(hdr)
	if sm == nil {
		return 0, fmt.Errorf("npy: header has no shape: %q", hdr)
	}
	var dims []int
	for _, f := range strings.Split(sm[1], ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		d, err := strconv.Atoi(f)
		if err != nil {
			return 0, fmt.Errorf("npy: bad shape %q", sm[1])
		}
		dims = append(dims, d)
	}
	switch {
	case len(dims) == 1:
		return dims[0], nil
	case len(dims) == 2 && dims[0] == 1:
		return dims[1], nil
	}
	return 0, fmt.Errorf("npy: shape (%s) is not one row (want (V,) or (1, V))", sm[1])
}

// DrawCounts draws n tokens from row (Params and history as given) with
// noise key seed and noise row = draw index, in batches, and returns how
// often each token was drawn.
func DrawCounts(s *Sampler, row Row, n int, seed uint64) (map[int32]int, error) {
	const batch = 64
	rows := make([]Row, batch)
	out := make([]Result, batch)
	counts := make(map[int32]int)
	for d := 0; d < n; d += batch {
		m := min(batch, n-d)
		for i := range m {
			rows[i] = row
			rows[i].Noise = nil
			rows[i].NoiseKey, rows[i].NoiseRow = seed, uint64(d+i)
		}
		s.Sample(rows[:m], out[:m])
		for _, r := range out[:m] {
			if r.Err != nil {
				return nil, r.Err
			}
			counts[r.Token]++
		}
	}
	return counts, nil
}
