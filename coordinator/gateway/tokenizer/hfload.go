package tokenizer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// hfEncoder encodes with a tokenizer.json's pipeline: split out added
// tokens, then normalize, pre-tokenize and run the BPE model on the rest.
type hfEncoder struct {
	added     *regexp.Regexp // nil without added tokens
	addedIDs  map[string]int32
	normalize normalizer
	pre       preTokenizer
	model     *bpeModel
}

func loadHF(spec, path string) (*Tokenizer, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, readError(spec, path, err)
	}
	t, err := parseHF(data)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", path, err)
	}
	t.name = spec
	cfgPath := filepath.Join(filepath.Dir(path), "tokenizer_config.json")
	cfg, err := readConfig(cfgPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return t, nil
	case err != nil:
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	if err := t.applyConfig(cfg, filepath.Dir(path)); err != nil {
		return nil, fmt.Errorf("tokenizer: %s: %w", cfgPath, err)
	}
	return t, nil
}

// hubID matches what looks like a Hugging Face hub ID, "owner/name".
var hubID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// readError explains a tokenizer.json that cannot be read: a spec that
// does not exist gets the hint that only local files are read, and a hub
// ID the way to fetch one.
func readError(spec, path string, err error) error {
	if !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("tokenizer: %w", err)
	}
	if path != spec { // a directory without the file
		return fmt.Errorf("tokenizer: %s: the directory has no tokenizer.json", spec)
	}
	msg := fmt.Sprintf("tokenizer: %s: no such file or directory: a tokenizer is a local tokenizer.json, the directory holding one, or tiktoken:<encoding>; nothing is downloaded", spec)
	if hubID.MatchString(spec) {
		msg += fmt.Sprintf(" (%q looks like a Hugging Face hub ID: download the model's files first, e.g. huggingface-cli download %s --local-dir DIR, and give DIR)", spec, spec)
	}
	return errors.New(msg)
}

// parseHF builds a Tokenizer from the bytes of a tokenizer.json.
func parseHF(data []byte) (*Tokenizer, error) {
	var f hfFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, err
	}
	model, err := buildModel(f.Model)
	if err != nil {
		return nil, err
	}
	t := &Tokenizer{}
	if err := t.buildTable(&f, model); err != nil {
		return nil, err
	}
	enc := &hfEncoder{model: model, addedIDs: map[string]int32{}}
	if enc.normalize, err = buildNormalizer("normalizer", f.Normalizer); err != nil {
		return nil, err
	}
	if enc.pre, err = buildPreTokenizer("pre_tokenizer", f.PreTokenizer); err != nil {
		return nil, err
	}
	enc.setAdded(f.AddedTokens)
	t.enc = enc
	var specials []string
	for _, a := range f.AddedTokens {
		if a.Special && a.Content != "" {
			specials = append(specials, a.Content)
		}
	}
	t.specials = newSpecialSet(specials)
	if t.pre, t.post, _, err = buildPostProcessor("post_processor", f.PostProcessor, enc.lookup); err != nil {
		return nil, err
	}
	return t, t.checkIDs(append(append([]int32{}, t.pre...), t.post...), "post_processor")
}

func (t *Tokenizer) checkIDs(ids []int32, field string) error {
	for _, id := range ids {
		if int(id) >= len(t.pieces) {
			return fmt.Errorf("%s: id %d is beyond the vocab (%d)", field, id, len(t.pieces))
		}
	}
	return nil
}

// buildTable fills the decode table from the vocab and the added tokens.
func (t *Tokenizer) buildTable(f *hfFile, m *bpeModel) error {
	var d decodeSpec
	if err := buildDecoder("decoder", f.Decoder, &d); err != nil {
		return err
	}
	t.stripLeading = d.stripLeading
	size := int32(0)
	for _, id := range m.vocab {
		size = max(size, id+1)
	}
	for i, a := range f.AddedTokens {
		if a.ID < 0 || a.ID >= maxID {
			return fmt.Errorf("added_tokens[%d].id: %d out of range [0, %d)", i, a.ID, maxID)
		}
		size = max(size, int32(a.ID)+1)
	}
	t.pieces = make([][]byte, size)
	t.special = make([]bool, size)
	for s, id := range m.vocab {
		t.pieces[id] = d.tokenBytes(s)
	}
	for _, a := range f.AddedTokens {
		t.pieces[a.ID] = d.tokenBytes(a.Content)
		t.special[a.ID] = a.Special
	}
	return nil
}

// setAdded prepares the split on added tokens, longest first where one is
// a prefix of another.
func (e *hfEncoder) setAdded(tokens []hfAddedToken) {
	var alts []string
	for _, a := range tokens {
		if a.Content == "" {
			continue
		}
		e.addedIDs[a.Content] = int32(a.ID)
		alts = append(alts, a.Content)
	}
	if len(alts) == 0 {
		return
	}
	sort.SliceStable(alts, func(i, j int) bool { return len(alts[i]) > len(alts[j]) })
	for i, a := range alts {
		alts[i] = regexp.QuoteMeta(a)
	}
	e.added = regexp.MustCompile(strings.Join(alts, "|"))
}

func (e *hfEncoder) encode(text string, plain map[rune]string) ([]int32, error) {
	var ids []int32
	at, first := 0, true
	if e.added != nil {
		for _, m := range e.added.FindAllStringIndex(text, -1) {
			ids = e.encodeSegment(ids, unescape(text[at:m[0]], plain), first)
			ids = append(ids, e.addedIDs[text[m[0]:m[1]]])
			at, first = m[1], false
		}
	}
	return e.encodeSegment(ids, unescape(text[at:], plain), first), nil
}

func (e *hfEncoder) encodeSegment(ids []int32, s string, first bool) []int32 {
	if s == "" {
		return ids
	}
	if e.normalize != nil {
		s = e.normalize(s)
	}
	words := []string{s}
	if e.pre != nil {
		words = e.pre(words, first)
	}
	for _, w := range words {
		ids = e.model.encodeWord(ids, w)
	}
	return ids
}

// otherModels are the tokenizers library's model types other than BPE:
// refused by name, whatever their fields.
var otherModels = map[string]string{
	"WordPiece": "BERT-style", "WordLevel": "one token per word", "Unigram": "SentencePiece Unigram, as T5, ALBERT and XLNet have",
}

// modelOf reads model's type first, so that a model of another type is
// refused by name rather than by its fields failing to decode as BPE's.
func modelOf(raw json.RawMessage) (*hfModel, error) {
	var head struct {
		Type   string          `json:"type"`
		Merges json.RawMessage `json:"merges"`
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("model: missing")
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if what, ok := otherModels[head.Type]; ok {
		return nil, fmt.Errorf("model.type: %q (%s) is not supported: only BPE models are (byte-level as GPT-2, Llama 3 and Qwen have, or SentencePiece-style BPE as Llama 2 and Mistral have)", head.Type, what)
	}
	// A file without model.type but with merges is BPE, as the
	// tokenizers library guesses it.
	if head.Type != "BPE" && (head.Type != "" || head.Merges == nil) {
		return nil, fmt.Errorf("model.type: %q is not a model type of the tokenizers library (BPE, WordPiece, WordLevel, Unigram); only BPE is supported", head.Type)
	}
	var m hfModel
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("model (BPE): %w", err)
	}
	return &m, nil
}

func buildModel(raw json.RawMessage) (*bpeModel, error) {
	m, err := modelOf(raw)
	if err != nil {
		return nil, err
	}
	if m.ContinuingSubwordPrefix != nil && *m.ContinuingSubwordPrefix != "" ||
		m.EndOfWordSuffix != nil && *m.EndOfWordSuffix != "" {
		return nil, errors.New("model: continuing_subword_prefix and end_of_word_suffix are not supported")
	}
	b := &bpeModel{vocab: make(map[string]int32, len(m.Vocab)), unk: -1, ignoreMerges: m.IgnoreMerges}
	for s, id := range m.Vocab {
		if id < 0 || id >= maxID {
			return nil, fmt.Errorf("model.vocab[%q]: id %d out of range [0, %d)", s, id, maxID)
		}
		b.vocab[s] = int32(id)
	}
	if m.UnkToken != nil {
		id, ok := b.vocab[*m.UnkToken]
		if !ok {
			return nil, fmt.Errorf("model.unk_token: %q is not in the vocab", *m.UnkToken)
		}
		b.unk = id
	}
	b.setByteFallback(m.ByteFallback)
	merges, err := parseMerges(m.Merges, b.vocab)
	if err != nil {
		return nil, err
	}
	b.merges = merges
	return b, nil
}

func (m *bpeModel) setByteFallback(on bool) {
	for i := range m.byteFallback {
		m.byteFallback[i] = -1
		if id, ok := m.vocab[fmt.Sprintf("<0x%02X>", i)]; ok && on {
			m.byteFallback[i] = id
			m.hasFallback = true
		}
	}
}

// parseMerges reads merges in either form: "a b" strings or ["a", "b"].
func parseMerges(raw json.RawMessage, vocab map[string]int32) (map[[2]int32]merge, error) {
	var list []json.RawMessage
	if len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("model.merges: %w", err)
		}
	}
	out := make(map[[2]int32]merge, len(list))
	for i, r := range list {
		a, b, err := mergePair(r)
		if err != nil {
			return nil, fmt.Errorf("model.merges[%d]: %w", i, err)
		}
		ia, oka := vocab[a]
		ib, okb := vocab[b]
		ic, okc := vocab[a+b]
		if !oka || !okb || !okc {
			return nil, fmt.Errorf("model.merges[%d]: %q + %q: a part or the result is not in the vocab", i, a, b)
		}
		if _, dup := out[[2]int32{ia, ib}]; !dup {
			out[[2]int32{ia, ib}] = merge{rank: int32(i), id: ic}
		}
	}
	return out, nil
}

func mergePair(r json.RawMessage) (string, string, error) {
	var s string
	if err := json.Unmarshal(r, &s); err == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok || strings.Contains(b, " ") {
			return "", "", fmt.Errorf("%q is not two tokens separated by a space", s)
		}
		return a, b, nil
	}
	var pair []string
	if err := json.Unmarshal(r, &pair); err != nil || len(pair) != 2 {
		return "", "", errors.New("neither \"a b\" nor [\"a\", \"b\"]")
	}
	return pair[0], pair[1], nil
}
