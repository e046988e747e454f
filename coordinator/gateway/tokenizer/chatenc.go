package tokenizer

import (
	"regexp"
	"slices"
	"strings"
)

// Chat content is the user's, the template is the operator's: special
// tokens written in a message (its content or role) are encoded as the
// plain text they are, so that no message can open or close a turn, while
// the template's own markers stay special. Before rendering, each special
// token's text in a message becomes a placeholder, a code point of
// Unicode's supplementary private use planes that the template does not
// hold; the rendered prompt is split at the special tokens it still
// holds (the template's) and each placeholder is turned back into its
// text before the text between them is encoded.

// placeholderBase is the first placeholder: U+F0000, plane 15 (private use).
const placeholderBase = 0xF0000

// escaper replaces, in messages, what must not be read as a special token.
type escaper struct {
	specials *specialSet
	avoid    string          // the template's source: no placeholder it holds
	plain    map[rune]string // placeholder → the text it stands for
	of       map[string]rune
	next     rune
}

// specialSet is a tokenizer's special tokens: their texts, longest first,
// and a pattern matching any of them, the longest where several could.
type specialSet struct {
	texts []string
	re    *regexp.Regexp // nil without special tokens
}

func newSpecialSet(texts []string) *specialSet {
	out := slices.Clone(texts)
	slices.SortFunc(out, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	out = slices.Compact(slices.DeleteFunc(out, func(s string) bool { return s == "" }))
	set := &specialSet{texts: out}
	if len(out) > 0 {
		quoted := make([]string, len(out))
		for i, s := range out {
			quoted[i] = regexp.QuoteMeta(s)
		}
		set.re = regexp.MustCompile(strings.Join(quoted, "|"))
	}
	return set
}

func newEscaper(specials *specialSet, avoid string) *escaper {
	return &escaper{specials: specials, avoid: avoid, plain: map[rune]string{}, of: map[string]rune{}, next: placeholderBase}
}

func (e *escaper) placeholder(s string) rune {
	if r, ok := e.of[s]; ok {
		return r
	}
	for strings.ContainsRune(e.avoid, e.next) {
		e.next++
	}
	r := e.next
	e.next++
	e.plain[r], e.of[s] = s, r
	return r
}

// escape replaces in s each special token, each code point of the private
// use planes (it could be taken for a placeholder), and a start or end of
// s that could join the template's text around it into a special token (a
// proper suffix or prefix of one).
func (e *escaper) escape(s string) string {
	head := e.edge(s, true)
	tail := e.edge(s[head:], false)
	var b strings.Builder
	if head > 0 {
		b.WriteRune(e.placeholder(s[:head]))
	}
	body, at := s[head:len(s)-tail], 0
	var matches [][]int
	if e.specials.re != nil {
		matches = e.specials.re.FindAllStringIndex(body, -1)
	}
	for _, m := range matches {
		e.escapePrivate(&b, body[at:m[0]])
		b.WriteRune(e.placeholder(body[m[0]:m[1]]))
		at = m[1]
	}
	e.escapePrivate(&b, body[at:])
	if tail > 0 {
		b.WriteRune(e.placeholder(s[len(s)-tail:]))
	}
	return b.String()
}

// escapePrivate writes s with each code point of the private use planes
// replaced.
func (e *escaper) escapePrivate(b *strings.Builder, s string) {
	for _, r := range s {
		if r >= placeholderBase {
			b.WriteRune(e.placeholder(string(r)))
		} else {
			b.WriteRune(r)
		}
	}
}

// edge is the length of the longest start (head) or end of s that is a
// proper suffix (head) or prefix of a special token; 0 if none.
func (e *escaper) edge(s string, head bool) int {
	best := 0
	for _, sp := range e.specials.texts {
		for k := min(len(sp)-1, len(s)); k > best; k-- {
			if head && strings.HasSuffix(sp, s[:k]) || !head && strings.HasPrefix(sp, s[len(s)-k:]) {
				best = k
				break
			}
		}
	}
	return best
}

// unescape turns the placeholders in s back into their text.
func unescape(s string, plain map[rune]string) string {
	if len(plain) == 0 {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if t, ok := plain[r]; ok {
			b.WriteString(t)
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// EncodeChat renders msgs with the chat template and encodes the prompt:
// the template's special tokens as their ids, and special tokens written
// in a message's role or content as plain text (what the tokenizer makes
// of that text when it is not read as one token). addSpecial adds what
// the tokenizer adds around a sequence (the template usually writes BOS
// itself: false).
func (t *Tokenizer) EncodeChat(msgs []ChatMessage, addGenerationPrompt, addSpecial bool) ([]int32, error) {
	turns := make([]ChatTurn, len(msgs))
	for i, m := range msgs {
		turns[i] = ChatTurn{ChatMessage: m}
	}
	return t.EncodeChatTools(turns, nil, addGenerationPrompt, addSpecial)
}

// EncodeChatTools is EncodeChat with tool calling: the turns' calls and
// the tools go to the template too. Every string in them (names,
// descriptions, arguments, schemas) is plain text as content is.
func (t *Tokenizer) EncodeChatTools(turns []ChatTurn, tools []ChatTool, addGenerationPrompt, addSpecial bool) ([]int32, error) {
	if t.chat == nil {
		return nil, ErrNoChatTemplate
	}
	e := newEscaper(t.specials, t.chat.src+t.chat.bos+t.chat.eos)
	esc := make([]ChatTurn, len(turns))
	for i, m := range turns {
		esc[i] = ChatTurn{ChatMessage: ChatMessage{Role: e.escape(m.Role), Content: e.escape(m.Content)},
			Name: e.escape(m.Name), ToolCallID: e.escape(m.ToolCallID)}
		for _, c := range m.ToolCalls {
			esc[i].ToolCalls = append(esc[i].ToolCalls, ToolCall{ID: e.escape(c.ID), Name: e.escape(c.Name), Arguments: e.escapeValue(c.Arguments)})
		}
	}
	escTools := make([]ChatTool, len(tools))
	for i, tl := range tools {
		escTools[i] = ChatTool{Name: e.escape(tl.Name), Description: e.escape(tl.Description), Parameters: e.escapeValue(tl.Parameters)}
	}
	prompt, err := t.applyChatTemplate(esc, escTools, addGenerationPrompt)
	if err != nil {
		return nil, err
	}
	ids, err := t.enc.encode(prompt, e.plain)
	if err != nil {
		return nil, err
	}
	return t.wrap(ids, addSpecial), nil
}

// escapeValue escapes every string of a decoded JSON value (keys too).
func (e *escaper) escapeValue(v any) any {
	switch x := v.(type) {
	case string:
		return e.escape(x)
	case []any:
		out := make([]any, len(x))
		for i, y := range x {
			out[i] = e.escapeValue(y)
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, y := range x {
			out[e.escape(k)] = e.escapeValue(y)
		}
		return out
	}
	return v
}
