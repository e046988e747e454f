package tokenizer

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// maxID bounds the ids a tokenizer.json may use: the decode table is
// indexed by id, so a file must not make it allocate without limit.
const maxID = 1 << 24

// hfFile is the part of a Hugging Face tokenizer.json this package reads.
type hfFile struct {
	AddedTokens   []hfAddedToken  `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Decoder       json.RawMessage `json:"decoder"`
	Model         json.RawMessage `json:"model"`
}

type hfAddedToken struct {
	ID      int64  `json:"id"`
	Content string `json:"content"`
	Special bool   `json:"special"`
}

type hfModel struct {
	Type                    string           `json:"type"`
	Vocab                   map[string]int64 `json:"vocab"`
	Merges                  json.RawMessage  `json:"merges"`
	ByteFallback            bool             `json:"byte_fallback"`
	UnkToken                *string          `json:"unk_token"`
	ContinuingSubwordPrefix *string          `json:"continuing_subword_prefix"`
	EndOfWordSuffix         *string          `json:"end_of_word_suffix"`
	IgnoreMerges            bool             `json:"ignore_merges"`
}

// hfComponent holds the fields of every normalizer, pre-tokenizer,
// decoder and post-processor this package supports; type says which.
type hfComponent struct {
	Type             string                     `json:"type"`
	Normalizers      []json.RawMessage          `json:"normalizers"`
	PreTokenizers    []json.RawMessage          `json:"pretokenizers"`
	Decoders         []json.RawMessage          `json:"decoders"`
	Processors       []json.RawMessage          `json:"processors"`
	Pattern          *hfPattern                 `json:"pattern"`
	Content          string                     `json:"content"`
	Prepend          string                     `json:"prepend"`
	Behavior         string                     `json:"behavior"`
	Invert           bool                       `json:"invert"`
	AddPrefixSpace   *bool                      `json:"add_prefix_space"`
	UseRegex         *bool                      `json:"use_regex"`
	Replacement      string                     `json:"replacement"`
	PrependScheme    string                     `json:"prepend_scheme"`
	Split            *bool                      `json:"split"`
	IndividualDigits bool                       `json:"individual_digits"`
	Start            int                        `json:"start"`
	Stop             int                        `json:"stop"`
	Single           []hfTemplateItem           `json:"single"`
	SpecialTokens    map[string]hfSpecialTokens `json:"special_tokens"`
}

type hfPattern struct {
	String *string `json:"String"`
	Regex  *string `json:"Regex"`
}

type hfTemplateItem struct {
	SpecialToken *struct {
		ID string `json:"id"`
	} `json:"SpecialToken"`
	Sequence *struct {
		ID string `json:"id"`
	} `json:"Sequence"`
}

type hfSpecialTokens struct {
	IDs []int64 `json:"ids"`
}

// The component types of the Hugging Face tokenizers library, and those
// this package supports: a file with any other is refused naming it.
var (
	hfNormalizers    = []string{"BertNormalizer", "ByteLevel", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "Nmt", "Precompiled", "Prepend", "Replace", "Sequence", "Strip", "StripAccents"}
	hfPreTokenizers  = []string{"BertPreTokenizer", "ByteLevel", "CharDelimiterSplit", "Digits", "FixedLength", "Metaspace", "Punctuation", "Sequence", "Split", "UnicodeScripts", "Whitespace", "WhitespaceSplit"}
	hfDecoders       = []string{"BPEDecoder", "ByteFallback", "ByteLevel", "CTC", "Fuse", "Metaspace", "Replace", "Sequence", "Strip", "WordPiece"}
	hfPostProcessors = []string{"BertProcessing", "ByteLevel", "RobertaProcessing", "Sequence", "TemplateProcessing"}

	okNormalizers    = []string{"Sequence", "Prepend", "Replace", "NFC", "NFD", "NFKC", "NFKD", "Lowercase"}
	okPreTokenizers  = []string{"Sequence", "ByteLevel", "Split", "Metaspace", "Digits"}
	okDecoders       = []string{"Sequence", "ByteLevel", "ByteFallback", "Fuse", "Replace", "Strip", "Metaspace"}
	okPostProcessors = []string{"Sequence", "TemplateProcessing", "ByteLevel"}
)

// component decodes raw into c once its type is known to be one of ok (of
// the library's all); it reports false for JSON null or absent.
func component(field string, raw json.RawMessage, c *hfComponent, all, ok []string) (bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return false, nil
	}
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return false, fmt.Errorf("%s: %w", field, err)
	}
	switch {
	case head.Type == nil:
		return false, fmt.Errorf("%s.type: missing", field)
	case !slices.Contains(ok, *head.Type):
		return false, unsupported(field, *head.Type, all, ok)
	}
	if err := json.Unmarshal(raw, c); err != nil {
		return false, fmt.Errorf("%s (%s): %w", field, *head.Type, err)
	}
	return true, nil
}

// unsupported refuses a component type by name, saying what is supported.
func unsupported(field, typ string, all, ok []string) error {
	if !slices.Contains(all, typ) {
		return fmt.Errorf("%s.type: %q is not a type the Hugging Face tokenizers library knows there (supported: %s)", field, typ, strings.Join(ok, ", "))
	}
	return fmt.Errorf("%s.type: %q is not supported (supported: %s)", field, typ, strings.Join(ok, ", "))
}

func buildNormalizer(field string, raw json.RawMessage) (normalizer, error) {
	var c hfComponent
	if ok, err := component(field, raw, &c, hfNormalizers, okNormalizers); !ok {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var steps []normalizer
		for i, r := range c.Normalizers {
			n, err := buildNormalizer(fmt.Sprintf("%s.normalizers[%d]", field, i), r)
			if err != nil {
				return nil, err
			}
			if n != nil {
				steps = append(steps, n)
			}
		}
		return func(s string) string {
			for _, n := range steps {
				s = n(s)
			}
			return s
		}, nil
	case "Prepend":
		return func(s string) string {
			if s == "" {
				return s
			}
			return c.Prepend + s
		}, nil
	case "Replace":
		return replaceNormalizer(field, c)
	case "NFC", "NFD", "NFKC", "NFKD":
		return unicodeNormalizer(c.Type), nil
	case "Lowercase":
		return strings.ToLower, nil
	}
	return nil, unsupported(field, c.Type, hfNormalizers, okNormalizers)
}

func replaceNormalizer(field string, c hfComponent) (normalizer, error) {
	m, err := patternMatcher(field, c.Pattern)
	if err != nil {
		return nil, err
	}
	return func(s string) string {
		var b strings.Builder
		at := 0
		for _, r := range m(s) {
			b.WriteString(s[at:r[0]])
			b.WriteString(c.Content)
			at = r[1]
		}
		b.WriteString(s[at:])
		return b.String()
	}, nil
}

// patternMatcher is a String pattern matched literally or a Regex one.
func patternMatcher(field string, p *hfPattern) (matcher, error) {
	switch {
	case p == nil:
		return nil, fmt.Errorf("%s.pattern: missing", field)
	case p.String != nil:
		if *p.String == "" {
			return nil, fmt.Errorf("%s.pattern.String: empty", field)
		}
		return stdMatcher(regexp.MustCompile(regexp.QuoteMeta(*p.String))), nil
	case p.Regex != nil:
		m, err := regexp2Matcher(*p.Regex)
		if err != nil {
			return nil, fmt.Errorf("%s.pattern.Regex: %w", field, err)
		}
		return m, nil
	}
	return nil, fmt.Errorf("%s.pattern: neither String nor Regex", field)
}

func buildPreTokenizer(field string, raw json.RawMessage) (preTokenizer, error) {
	var c hfComponent
	if ok, err := component(field, raw, &c, hfPreTokenizers, okPreTokenizers); !ok {
		return nil, err
	}
	switch c.Type {
	case "Sequence":
		var steps []preTokenizer
		for i, r := range c.PreTokenizers {
			p, err := buildPreTokenizer(fmt.Sprintf("%s.pretokenizers[%d]", field, i), r)
			if err != nil {
				return nil, err
			}
			if p != nil {
				steps = append(steps, p)
			}
		}
		return sequencePre(steps), nil
	case "ByteLevel":
		return byteLevelPre(boolOr(c.AddPrefixSpace, true), boolOr(c.UseRegex, true)), nil
	case "Split":
		m, err := patternMatcher(field, c.Pattern)
		if err != nil {
			return nil, err
		}
		if !splitBehaviors[c.Behavior] {
			return nil, fmt.Errorf("%s.behavior: %q is not supported", field, c.Behavior)
		}
		return splitPre(m, c.Behavior, c.Invert), nil
	case "Metaspace":
		return metaspaceFrom(field, c)
	case "Digits":
		re := `\p{Nd}+`
		if c.IndividualDigits {
			re = `\p{Nd}`
		}
		return splitPre(stdMatcher(regexp.MustCompile(re)), "Isolated", false), nil
	}
	return nil, unsupported(field, c.Type, hfPreTokenizers, okPreTokenizers)
}

func metaspaceFrom(field string, c hfComponent) (preTokenizer, error) {
	if c.Replacement == "" {
		return nil, fmt.Errorf("%s.replacement: missing", field)
	}
	scheme, err := metaspaceScheme(field, c)
	if err != nil {
		return nil, err
	}
	return metaspacePre(c.Replacement, scheme, boolOr(c.Split, true)), nil
}

// metaspaceScheme is prepend_scheme, or what the older add_prefix_space
// said: always when true.
func metaspaceScheme(field string, c hfComponent) (string, error) {
	switch c.PrependScheme {
	case "always", "first", "never":
		return c.PrependScheme, nil
	case "":
		if boolOr(c.AddPrefixSpace, true) {
			return "always", nil
		}
		return "never", nil
	}
	return "", fmt.Errorf("%s.prepend_scheme: %q is not one of always, first, never", field, c.PrependScheme)
}

func boolOr(p *bool, def bool) bool {
	if p == nil {
		return def
	}
	return *p
}
