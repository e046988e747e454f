package tokenizer

import (
	"encoding/binary"
	"strings"
	"testing"
	"unicode/utf8"
)

// maxStreamCheck bounds the ids FuzzEncode streams (checkStream).
const maxStreamCheck = 512

// FuzzEncode: text from a request never panics any tokenizer, and the
// byte-level fixture gives back exactly the text it was given (unless the
// text spells a special token, which Decode skips).
func FuzzEncode(f *testing.F) {
	for _, s := range []string{"", "Hello, world!", partialText, streamText, "<s></s><|user|>", "\xff\xfe", "  \t\n"} {
		f.Add(s)
	}
	fixture := loadFixture(f)
	sp := map[string]*Tokenizer{"legacy": loadSP(f, spLegacy), "metaspace": loadSP(f, spMetaspace)}
	f.Fuzz(func(t *testing.T, text string) {
		ids, err := fixture.Encode(text, true)
		if err != nil {
			t.Fatal(err)
		}
		back, err := fixture.Decode(ids)
		if err != nil {
			t.Fatal(err)
		}
		if utf8.ValidString(text) && !strings.Contains(text, "<") && back != text {
			t.Fatalf("%q -> %v -> %q", text, ids, back)
		}
		for name, tk := range sp {
			ids, err := tk.Encode(text, true)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			// checkStream decodes every prefix, quadratic in the ids: a
			// 16 KB input kept a fuzz worker busy for a minute in CI. A
			// stream's state is its last incomplete character, so the
			// first ids exercise it as well as all of them.
			if err := checkStream(tk, ids[:min(len(ids), maxStreamCheck)]); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
	})
}

// FuzzStream: any ids, in range or not, never panic Decode or a Stream,
// and the stream always agrees with Decode.
func FuzzStream(f *testing.F) {
	f.Add([]byte{0, 1, 0xff, 0xff, 0, 0, 2, 1})
	f.Add([]byte("\x06\x01\x00\x00\x07\x01\x00\x00"))
	tk := loadFixture(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var ids []int32
		for len(data) >= 4 {
			ids = append(ids, int32(binary.LittleEndian.Uint32(data))%600)
			data = data[4:]
		}
		_, decodeErr := tk.Decode(ids)
		s := tk.NewStream()
		var addErr error
		for _, id := range ids {
			if _, err := s.Add(id); err != nil {
				addErr = err
			}
		}
		s.Flush()
		if (decodeErr == nil) != (addErr == nil) {
			t.Fatalf("Decode err %v, Add err %v", decodeErr, addErr)
		}
		if decodeErr == nil {
			if err := checkStream(tk, ids); err != nil {
				t.Fatal(err)
			}
		}
	})
}
