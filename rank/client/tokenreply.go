package client

import (
	"math"
	"strconv"
)

// Token replies are most of rank 0's messages: one per token of every
// stream. Both ends take a short path for them, free of reflection, that
// writes and reads exactly what encoding/json makes of a GenerateReply
// holding only Token and Index: {"token":T} for index 0 (omitempty) and
// {"token":T,"index":I} after it. Anything else goes through encoding/json.

// AppendTokenReply appends the JSON of GenerateReply{Token: &tok, Index:
// index} to b, byte for byte what json.Marshal writes.
func AppendTokenReply(b []byte, tok int32, index int) []byte {
	b = append(b, `{"token":`...)
	b = strconv.AppendInt(b, int64(tok), 10)
	if index != 0 {
		b = append(b, `,"index":`...)
		b = strconv.AppendInt(b, int64(index), 10)
	}
	return append(b, '}')
}

// parseTokenReply reads a reply AppendTokenReply wrote. ok is false for any
// other message, which the caller decodes with encoding/json.
func parseTokenReply(b []byte) (tok int32, index int, ok bool) {
	const head, mid = `{"token":`, `,"index":`
	if len(b) < len(head)+2 || string(b[:len(head)]) != head || b[len(b)-1] != '}' {
		return 0, 0, false
	}
	b = b[len(head) : len(b)-1]
	t, n := parseInt(b, math.MinInt32, math.MaxInt32)
	if n == 0 {
		return 0, 0, false
	}
	b = b[n:]
	if len(b) == 0 {
		return int32(t), 0, true
	}
	if len(b) <= len(mid) || string(b[:len(mid)]) != mid {
		return 0, 0, false
	}
	b = b[len(mid):]
	i, n := parseInt(b, math.MinInt, math.MaxInt)
	if n == 0 || n != len(b) || i == 0 {
		return 0, 0, false // "index":0 is never written (omitempty)
	}
	return int32(t), int(i), true
}

// parseInt reads a JSON integer in [lo, hi] at the start of b: an optional
// minus, then 0 or a digit 1-9 and more digits. It returns the value and
// the bytes read, 0 if b does not start with one in range (or it runs on
// into a fraction or an exponent, which encoding/json would take as a
// number of another type).
func parseInt(b []byte, lo, hi int64) (int64, int) {
	neg, n := false, 0
	if n < len(b) && b[n] == '-' {
		neg, n = true, 1
	}
	start := n
	var v int64
	for n < len(b) && b[n] >= '0' && b[n] <= '9' {
		d := int64(b[n] - '0')
		if n > start && v == 0 {
			return 0, 0 // a leading zero
		}
		if neg {
			if v < (lo+d)/10 {
				return 0, 0
			}
			v = v*10 - d
		} else {
			if v > (hi-d)/10 {
				return 0, 0
			}
			v = v*10 + d
		}
		n++
	}
	if n == start || v < lo || v > hi || (n < len(b) && (b[n] == '.' || b[n] == 'e' || b[n] == 'E')) {
		return 0, 0
	}
	return v, n
}
