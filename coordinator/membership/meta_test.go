package membership

import (
	"strings"
	"testing"
)

func TestMetaCacheDecodesLikeDecodeMeta(t *testing.T) {
	mc := newMetaCache(3)
	raws := make([][]byte, 5)
	for i := range raws {
		b, err := Meta{Job: "j", Rank: i, World: 5, Epoch: uint32(i)}.encode()
		if err != nil {
			t.Fatal(err)
		}
		raws[i] = b
	}
	for round := range 3 {
		for i, b := range raws {
			got, err := mc.decode(b)
			if err != nil {
				t.Fatalf("round %d, rank %d: %v", round, i, err)
			}
			want, _ := decodeMeta(b)
			if got != want {
				t.Fatalf("round %d, rank %d: cache gave %+v, decodeMeta %+v", round, i, got, want)
			}
			if _, ok := mc.byBytes[string(b)]; !ok {
				t.Fatalf("round %d, rank %d: not cached after a decode", round, i)
			}
			if n := len(mc.byBytes); n > 3 {
				t.Fatalf("cache holds %d entries, bound 3", n)
			}
		}
	}
}

// The cache's key is its own copy: a caller that reuses its buffer (as
// memberlist does with packets) changes nothing cached.
func TestMetaCacheKeepsItsOwnKey(t *testing.T) {
	raw, err := Meta{Job: "j", Rank: 1, World: 2}.encode()
	if err != nil {
		t.Fatal(err)
	}
	mc := newMetaCache(8)
	buf := append([]byte(nil), raw...)
	want, err := mc.decode(buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, strings.Repeat("x", len(buf)))
	got, err := mc.decode(raw)
	if err != nil || got != want {
		t.Fatalf("after the caller's buffer changed: %+v, %v; want %+v", got, err, want)
	}
	if n := len(mc.byBytes); n != 1 {
		t.Fatalf("cache holds %d entries, want 1 (the second decode a hit)", n)
	}
}

// Metadata that does not decode, or is longer than MetaLimit, is decoded
// each time and never cached.
func TestMetaCacheSkipsBadAndLongMetadata(t *testing.T) {
	if _, err := (Meta{Job: "j", Rank: 1, World: 2, Version: strings.Repeat("v", MetaLimit)}).encode(); err == nil {
		t.Fatal("encode accepted metadata over MetaLimit")
	}
	long := []byte(`{"job":"j","rank":1,"world":2,"version":"` + strings.Repeat("v", MetaLimit) + `"}`)
	mc := newMetaCache(8)
	for i := range 2 {
		if _, err := mc.decode([]byte("{not json")); err == nil {
			t.Fatalf("try %d: bad metadata decoded", i)
		}
		if _, err := mc.decode(nil); err == nil {
			t.Fatalf("try %d: empty metadata decoded", i)
		}
		if m, err := mc.decode(long); err != nil || m.Rank != 1 {
			t.Fatalf("try %d: long metadata: %+v, %v", i, m, err)
		}
	}
	if n := len(mc.byBytes); n != 0 {
		t.Fatalf("cache holds %d entries after bad and long metadata only", n)
	}
}
