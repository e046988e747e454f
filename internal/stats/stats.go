package stats

import "slices"

// Number is what Median takes the middle of: integers (time.Duration
// among them) and floats.
type Number interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

// Median is the middle value of v, the mean of the two middle ones for an
// even count (rounded toward zero for integers), 0 for none. v is not
// modified.
func Median[T Number](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
