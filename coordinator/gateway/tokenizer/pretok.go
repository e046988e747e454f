package tokenizer

import (
	"regexp"
	"strings"
	"sync"

	"github.com/dlclark/regexp2"
	"golang.org/x/text/unicode/norm"
)

// normalizer rewrites one segment of text between added tokens.
type normalizer func(string) string

// preTokenizer splits words into smaller words; first is true for the
// segment that starts the text (Metaspace's prepend_scheme "first").
type preTokenizer func(words []string, first bool) []string

// matcher returns the byte ranges of a pattern's matches in s.
type matcher func(s string) [][2]int

// gpt2Pattern is the ByteLevel pre-tokenizer's split, as in GPT-2.
const gpt2Pattern = `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`

// gpt2Matcher compiles gpt2Pattern on first use, not at package
// initialisation: every rank process links this package, and only a
// gateway tokenizes.
var gpt2Matcher = sync.OnceValue(func() matcher {
	m, err := regexp2Matcher(gpt2Pattern)
	if err != nil {
		panic(err) // only for the constant pattern above
	}
	return m
})

// regexp2Matcher compiles a tokenizer.json Regex pattern. regexp2 is used
// because the patterns in the wild use lookahead, which RE2 lacks.
func regexp2Matcher(p string) (matcher, error) {
	re, err := regexp2.Compile(p, regexp2.Unicode)
	if err != nil {
		return nil, err
	}
	return func(s string) [][2]int {
		var out [][2]int
		// regexp2 reports offsets in runes; off maps them to bytes.
		var off []int
		m, err := re.FindStringMatch(s)
		for err == nil && m != nil {
			if off == nil {
				off = runeOffsets(s)
			}
			out = append(out, [2]int{off[m.Index], off[m.Index+m.Length]})
			m, err = re.FindNextMatch(m)
		}
		return out
	}, nil
}

// runeOffsets[i] is the byte offset of rune i, with one entry past the end.
func runeOffsets(s string) []int {
	off := make([]int, 0, len(s)+1)
	for i := range s {
		off = append(off, i)
	}
	return append(off, len(s))
}

func stdMatcher(re *regexp.Regexp) matcher {
	return func(s string) [][2]int {
		var out [][2]int
		for _, m := range re.FindAllStringIndex(s, -1) {
			out = append(out, [2]int{m[0], m[1]})
		}
		return out
	}
}

// splitBy splits s around the matches of m, keeping or gluing the matched
// parts as the tokenizers library's SplitDelimiterBehavior says.
func splitBy(s string, m matcher, behavior string, invert bool) []string {
	type part struct {
		text  string
		match bool
	}
	var parts []part
	at := 0
	for _, r := range m(s) {
		if r[0] > at {
			parts = append(parts, part{s[at:r[0]], invert})
		}
		if r[1] > r[0] {
			parts = append(parts, part{s[r[0]:r[1]], !invert})
		}
		at = r[1]
	}
	if at < len(s) {
		parts = append(parts, part{s[at:], invert})
	}
	var out []string
	glueNext := false
	for i, p := range parts {
		switch {
		case behavior == "Removed" && p.match:
			continue
		case behavior == "MergedWithPrevious" && p.match && len(out) > 0 && !parts[i-1].match:
			out[len(out)-1] += p.text
			continue
		case behavior == "Contiguous" && p.match && i > 0 && parts[i-1].match:
			out[len(out)-1] += p.text
			continue
		case glueNext:
			out[len(out)-1] += p.text
		default:
			out = append(out, p.text)
		}
		glueNext = behavior == "MergedWithNext" && p.match
	}
	return out
}

var splitBehaviors = map[string]bool{"Removed": true, "Isolated": true,
	"MergedWithPrevious": true, "MergedWithNext": true, "Contiguous": true}

// byteChars is the GPT-2 byte alphabet: printable bytes stand for
// themselves, the others for the code points from U+0100 on, in order.
var byteChars, charBytes = byteAlphabet()

func byteAlphabet() ([256]string, map[rune]byte) {
	var chars [256]string
	inv := make(map[rune]byte, 256)
	n := 0
	for b := 0; b < 256; b++ {
		r := rune(b)
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE
		if !printable {
			r = rune(256 + n)
			n++
		}
		chars[b] = string(r)
		inv[r] = byte(b)
	}
	return chars, inv
}

func toByteChars(s string) string {
	var b strings.Builder
	b.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		b.WriteString(byteChars[s[i]])
	}
	return b.String()
}

func byteLevelPre(addPrefixSpace, useRegex bool) preTokenizer {
	return func(words []string, _ bool) []string {
		var out []string
		for _, w := range words {
			if addPrefixSpace && !strings.HasPrefix(w, " ") {
				w = " " + w
			}
			parts := []string{w}
			if useRegex {
				parts = splitBy(w, gpt2Matcher(), "Isolated", false)
			}
			for _, p := range parts {
				out = append(out, toByteChars(p))
			}
		}
		return out
	}
}

func splitPre(m matcher, behavior string, invert bool) preTokenizer {
	return func(words []string, _ bool) []string {
		var out []string
		for _, w := range words {
			out = append(out, splitBy(w, m, behavior, invert)...)
		}
		return out
	}
}

func metaspacePre(repl, scheme string, split bool) preTokenizer {
	sep := stdMatcher(regexp.MustCompile(regexp.QuoteMeta(repl)))
	return func(words []string, first bool) []string {
		var out []string
		for i, w := range words {
			w = strings.ReplaceAll(w, " ", repl)
			if (scheme == "always" || (scheme == "first" && first && i == 0)) &&
				!strings.HasPrefix(w, repl) {
				w = repl + w
			}
			if split {
				out = append(out, splitBy(w, sep, "MergedWithNext", false)...)
			} else {
				out = append(out, w)
			}
		}
		return out
	}
}

func sequencePre(steps []preTokenizer) preTokenizer {
	return func(words []string, first bool) []string {
		for _, s := range steps {
			words = s(words, first)
		}
		return words
	}
}

func unicodeNormalizer(typ string) normalizer {
	f := map[string]norm.Form{"NFC": norm.NFC, "NFD": norm.NFD, "NFKC": norm.NFKC, "NFKD": norm.NFKD}[typ]
	return f.String
}
