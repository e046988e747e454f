package tokenizer

// Stream detokenizes one sequence a token at a time. It holds back only the
// bytes of a character not yet complete (at most 3), so each Add costs the
// length of its token, whatever the length of the sequence. Not safe for
// concurrent use; use one per sequence.
type Stream struct {
	t       *Tokenizer
	pending []byte // the start of a character still incomplete
	strip   int    // leading spaces still to drop, as Decode does
	out     []byte // reused for each result
}

// NewStream starts detokenizing a sequence.
func (t *Tokenizer) NewStream() *Stream {
	return &Stream{t: t, strip: t.stripLeading}
}

// Add takes the next id and returns the text it completes: never part of
// a UTF-8 character. The results of every Add and then Flush, joined, are
// Decode of all the ids. An id out of range is an error and changes nothing.
func (s *Stream) Add(id int32) (string, error) {
	p, err := s.t.piece(id)
	if err != nil {
		return "", err
	}
	p, s.strip = stripSpaces(p, s.strip)
	if len(p) == 0 {
		return "", nil
	}
	s.pending = append(s.pending, p...)
	var used int
	s.out, used = appendValid(s.out[:0], s.pending, false)
	s.pending = s.pending[:copy(s.pending, s.pending[used:])]
	return string(s.out), nil
}

// Flush returns what is left at the end of the sequence: an incomplete
// character's bytes, each as U+FFFD.
func (s *Stream) Flush() string {
	out, _ := appendValid(nil, s.pending, true)
	s.pending = s.pending[:0]
	return string(out)
}
