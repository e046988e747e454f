package membership

import "testing"

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
			if n := len(mc.byBytes); n > 3 {
				t.Fatalf("cache holds %d entries, bound 3", n)
			}
		}
	}
	// The caller's buffer may be reused: the cache keeps its own copy.
	b := append([]byte(nil), raws[4]...)
	want, _ := mc.decode(b)
	copy(b, "garbage")
	if got, _ := mc.decode(raws[4]); got != want {
		t.Fatalf("after the caller's buffer changed: %+v, want %+v", got, want)
	}
}

func TestMetaCacheRefusesBadMetadataEveryTime(t *testing.T) {
	mc := newMetaCache(8)
	for i := range 2 {
		if _, err := mc.decode([]byte("{not json")); err == nil {
			t.Fatalf("try %d: bad metadata decoded", i)
		}
		if _, err := mc.decode(nil); err == nil {
			t.Fatalf("try %d: empty metadata decoded", i)
		}
	}
	if n := len(mc.byBytes); n != 0 {
		t.Fatalf("cache holds %d entries after refusals only", n)
	}
}

func TestMetaCacheSize(t *testing.T) {
	for _, c := range []struct{ world, want int }{{0, 20}, {1, 20}, {64, 272}} {
		if got := metaCacheSize(c.world); got != c.want {
			t.Errorf("metaCacheSize(%d) = %d, want %d", c.world, got, c.want)
		}
	}
}
