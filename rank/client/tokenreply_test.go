package client

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/tpcoord/tpcoord/broadcast/api"
)

func TestAppendTokenReplyIsJSONMarshal(t *testing.T) {
	toks := []int32{0, 1, -1, 9, 10, 123456, math.MaxInt32, math.MinInt32}
	idxs := []int{0, 1, 7, 10, 65535, 1 << 20, math.MaxInt, -3}
	for _, tok := range toks {
		for _, idx := range idxs {
			want, err := json.Marshal(api.GenerateReply{Token: &tok, Index: idx})
			if err != nil {
				t.Fatal(err)
			}
			got := AppendTokenReply(nil, tok, idx)
			if string(got) != string(want) {
				t.Fatalf("token %d index %d: got %s, json.Marshal %s", tok, idx, got, want)
			}
			pt, pi, ok := parseTokenReply(got)
			if !ok || pt != tok || pi != idx {
				t.Fatalf("parseTokenReply(%s) = %d, %d, %v", got, pt, pi, ok)
			}
		}
	}
}

func TestParseTokenReplyRefusesOthers(t *testing.T) {
	for _, in := range []string{
		``, `{}`, `{"token":}`, `{"token":1`, `{"token":1,}`, `{"token":01}`, `{"token":1.0}`,
		`{"token":1e3}`, `{"token":2147483648}`, `{"token":-2147483649}`, `{"token":1,"index":0}`,
		`{"token":1,"index":"2"}`, `{"token":1,"index":2,"done":true}`, `{"token": 1}`,
		`{"token":1,"index":99999999999999999999}`, `{"token":-}`, `{"token":1}x`, `{"done":true}`,
		`{"token":1,"index":2 }`, `{"token":1,"index":-0}`,
	} {
		if tok, idx, ok := parseTokenReply([]byte(in)); ok {
			t.Errorf("parseTokenReply(%s) = %d, %d, true; want a refusal (encoding/json's turn)", in, tok, idx)
		}
	}
}

// FuzzParseTokenReply: whatever the short path accepts, encoding/json
// reads as the same token and index and nothing else.
func FuzzParseTokenReply(f *testing.F) {
	for _, s := range []string{`{"token":5}`, `{"token":-7,"index":3}`, `{"token":1,"index":0}`, `{"done":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tok, idx, ok := parseTokenReply(b)
		if !ok {
			return
		}
		var r api.GenerateReply
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("short path took %q, encoding/json refuses it: %v", b, err)
		}
		want := api.GenerateReply{Token: &tok, Index: idx}
		if r.Token == nil || *r.Token != tok || r.Index != idx || r.Done || r.Tokens != nil || r.Error != "" || r.Logprobs != nil {
			t.Fatalf("short path read %q as %+v, encoding/json as %+v", b, want, r)
		}
	})
}

func BenchmarkTokenReplyDecode(b *testing.B) {
	msg := AppendTokenReply(nil, 73125, 17)
	b.Run("short", func(b *testing.B) {
		for b.Loop() {
			if _, _, ok := parseTokenReply(msg); !ok {
				b.Fatal("refused")
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var r api.GenerateReply
			if err := json.Unmarshal(msg, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
