package node

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// jsonScanner reads JSON from a stream through a fixed buffer, one value at
// a time, so that a body is refused at the first byte that breaks a rule
// instead of after it has been read and unmarshalled whole. Its memory is
// its buffer, a string scratch of at most strMax bytes and a nesting stack
// of at most maxJSONDepth bytes, whatever the input.
//
// The grammar is RFC 8259's, as encoding/json accepts it: whitespace is
// space, tab, CR and LF; numbers are -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?;
// strings hold no raw control characters and only the escapes \" \\ \/ \b
// \f \n \r \t \uXXXX; nesting deeper than maxJSONDepth is refused.
type jsonScanner struct {
	r     io.Reader
	buf   []byte
	pos   int   // next unread byte of buf
	end   int   // end of the data in buf
	off   int64 // offset in the input of buf[0]
	err   error // what ended the input (io.EOF at its end), once read
	limit int64 // the most bytes of input read; beyond, errJSONTooLarge
	str   []byte
	stack []byte // closing bytes of the containers skipValue is inside
}

// errJSONTooLarge ends an input longer than the scanner's limit.
var errJSONTooLarge = errors.New("input too large")

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10_000

// jsonSyntaxError is input that is not JSON.
type jsonSyntaxError struct {
	msg string
	off int64
}

func (e *jsonSyntaxError) Error() string { return fmt.Sprintf("%s at byte %d", e.msg, e.off) }

// jsonReadError is a failure of the reader under the scanner.
type jsonReadError struct{ err error }

func (e *jsonReadError) Error() string { return e.err.Error() }
func (e *jsonReadError) Unwrap() error { return e.err }

func newJSONScanner(bufSize int) *jsonScanner {
	return &jsonScanner{buf: make([]byte, bufSize), str: make([]byte, 0, 64)}
}

// reset makes s read r from its start, at most limit bytes of it.
func (s *jsonScanner) reset(r io.Reader, limit int64) {
	s.r, s.pos, s.end, s.off, s.err, s.limit = r, 0, 0, 0, nil, limit
	s.str, s.stack = s.str[:0], s.stack[:0]
}

// fill reads until at least need bytes are unread or the input ends, and
// reports whether need bytes are there. need must be at most len(s.buf).
func (s *jsonScanner) fill(need int) bool {
	for empty := 0; s.end-s.pos < need && s.err == nil; {
		if s.pos > 0 {
			copy(s.buf, s.buf[s.pos:s.end])
			s.off += int64(s.pos)
			s.end -= s.pos
			s.pos = 0
		}
		n, err := s.r.Read(s.buf[s.end:])
		s.end += n
		switch {
		case s.off+int64(s.end) > s.limit:
			s.err = errJSONTooLarge
		case err != nil:
			s.err = err
		case n == 0:
			if empty++; empty >= 100 {
				s.err = io.ErrNoProgress
			}
		default:
			empty = 0
		}
	}
	return s.end-s.pos >= need
}

// ended is the error of input that ended where more was needed: the read
// error, or a syntax error at the end of the input.
func (s *jsonScanner) ended() error {
	if s.err != nil && s.err != io.EOF {
		return &jsonReadError{s.err}
	}
	return s.syntax("unexpected end of JSON input")
}

func (s *jsonScanner) syntax(format string, args ...any) error {
	return &jsonSyntaxError{msg: fmt.Sprintf(format, args...), off: s.off + int64(s.pos)}
}

// unexpected is the syntax error of byte c, just read, where want was due.
func (s *jsonScanner) unexpected(c byte, want string) error {
	s.pos-- // the offset of c
	return s.syntax("invalid character %s, want %s", quoteByte(c), want)
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("%q", rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// next consumes and returns the next byte that is not whitespace.
func (s *jsonScanner) next() (byte, error) {
	for {
		for s.pos < s.end {
			c := s.buf[s.pos]
			s.pos++
			if !isSpace(c) {
				return c, nil
			}
		}
		if !s.fill(1) {
			return 0, s.ended()
		}
	}
}

// expect consumes the next non-space byte, which must be want.
func (s *jsonScanner) expect(want byte) error {
	c, err := s.next()
	if err != nil {
		return err
	}
	if c != want {
		return s.unexpected(c, fmt.Sprintf("%q", rune(want)))
	}
	return nil
}

// atEnd reads the rest of the input, which must be whitespace.
func (s *jsonScanner) atEnd() error {
	for {
		for s.pos < s.end {
			c := s.buf[s.pos]
			s.pos++
			if !isSpace(c) {
				return s.unexpected(c, "the end of the input after the top-level value")
			}
		}
		if !s.fill(1) {
			if s.err == io.EOF {
				return nil
			}
			return s.ended()
		}
	}
}

// literal consumes the rest of true, false or null, whose first byte was
// consumed.
func (s *jsonScanner) literal(rest string) error {
	for i := range len(rest) {
		if s.pos >= s.end && !s.fill(1) {
			return s.ended()
		}
		c := s.buf[s.pos]
		s.pos++
		if c != rest[i] {
			return s.unexpected(c, fmt.Sprintf("%q in a literal", rune(rest[i])))
		}
	}
	return nil
}

// number consumes a number whose first byte c was consumed. It keeps the
// number's text in s.str (up to max bytes; longer is an error of the
// caller's, reported by long) when keep is set.
func (s *jsonScanner) number(c byte, keep bool, max int) (text []byte, long bool, err error) {
	if n := numberLen(s.buf[s.pos-1 : s.end]); n > 0 && (n <= max || !keep) {
		text = s.buf[s.pos-1 : s.pos-1+n]
		s.pos += n - 1
		return text, false, nil
	}
	s.str = s.str[:0]
	add := func(c byte) {
		if keep {
			if len(s.str) < max {
				s.str = append(s.str, c)
			} else {
				long = true
			}
		}
	}
	peek := func() (byte, bool) {
		if s.pos >= s.end && !s.fill(1) {
			return 0, false
		}
		return s.buf[s.pos], true
	}
	digits := func() (int, error) { // 0 or more digits
		n := 0
		for {
			d, ok := peek()
			if !ok {
				if s.err != io.EOF {
					return n, s.ended()
				}
				return n, nil
			}
			if d < '0' || d > '9' {
				return n, nil
			}
			add(d)
			s.pos++
			n++
		}
	}
	someDigits := func(where string) error { // 1 or more digits
		n, err := digits()
		if err == nil && n == 0 {
			err = s.digitDue(where)
		}
		return err
	}
	mark := func(marks string) (bool, error) { // the next byte when it is one of marks
		d, ok := peek()
		switch {
		case !ok && s.err != io.EOF:
			return false, s.ended()
		case !ok || strings.IndexByte(marks, d) < 0:
			return false, nil
		}
		add(d)
		s.pos++
		return true, nil
	}
	add(c)
	if c == '-' {
		d, ok := peek()
		if !ok {
			return nil, false, s.ended()
		}
		if d < '0' || d > '9' {
			s.pos++
			return nil, false, s.unexpected(d, "a digit after '-'")
		}
		add(d)
		s.pos++
		c = d
	}
	if c != '0' { // 1-9, then more digits
		if _, err := digits(); err != nil {
			return nil, false, err
		}
	}
	if ok, err := mark("."); err != nil {
		return nil, false, err
	} else if ok {
		if err := someDigits("after the decimal point"); err != nil {
			return nil, false, err
		}
	}
	if ok, err := mark("eE"); err != nil {
		return nil, false, err
	} else if ok {
		if _, err := mark("+-"); err != nil {
			return nil, false, err
		}
		if err := someDigits("in the exponent"); err != nil {
			return nil, false, err
		}
	}
	return s.str, long, nil
}

// numberLen returns the length of the valid number at the start of b when
// a byte that cannot continue it follows within b, else 0 (the slow path
// then reads more, or reports the error).
func numberLen(b []byte) int {
	i := 0
	digits := func() int {
		k := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i - k
	}
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case digits() == 0:
		return 0
	}
	if i < len(b) && b[i] == '.' {
		i++
		if digits() == 0 {
			return 0
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if digits() == 0 {
			return 0
		}
	}
	if i >= len(b) { // the number may go on past the buffer
		return 0
	}
	return i
}

func (s *jsonScanner) digitDue(where string) error {
	if s.pos >= s.end && !s.fill(1) {
		return s.ended()
	}
	s.pos++
	return s.unexpected(s.buf[s.pos-1], "a digit "+where)
}

// strInfo describes a string read by readString.
type strInfo struct {
	n   int  // decoded length in bytes (U+FFFD for each bad sequence)
	bad bool // invalid UTF-8 or a lone surrogate escape: no string of characters
}

// readString consumes the rest of a string whose opening quote was consumed and
// returns its decoded bytes, at most max of them (info.n is the whole
// length). The bytes alias the scanner's buffers: they are valid until the
// next call. Invalid UTF-8 and lone surrogate escapes are each decoded as
// U+FFFD, as encoding/json does, and reported in info.bad.
func (s *jsonScanner) readString(max int) ([]byte, strInfo, error) {
	// Fast path: printable ASCII without escapes, within the buffer.
	for i := s.pos; i < s.end; i++ {
		c := s.buf[i]
		if c == '"' {
			b := s.buf[s.pos:i]
			s.pos = i + 1
			info := strInfo{n: len(b)}
			if len(b) > max {
				b = b[:max]
			}
			return b, info, nil
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
	}
	return s.strSlow(max)
}

func (s *jsonScanner) strSlow(max int) ([]byte, strInfo, error) {
	var info strInfo
	s.str = s.str[:0]
	full := false // stored a prefix only: what follows is counted, not kept
	emit := func(b ...byte) {
		info.n += len(b)
		if full = full || len(s.str)+len(b) > max; !full {
			s.str = append(s.str, b...)
		}
	}
	var rb [utf8.UTFMax]byte
	emitRune := func(r rune) { emit(rb[:utf8.EncodeRune(rb[:], r)]...) }
	for {
		if s.pos >= s.end && !s.fill(1) {
			return nil, info, s.ended()
		}
		c := s.buf[s.pos]
		switch {
		case c == '"':
			s.pos++
			return s.str, info, nil
		case c == '\\':
			if !s.fill(2) {
				return nil, info, s.ended()
			}
			e := s.buf[s.pos+1]
			switch e {
			case '"', '\\', '/':
				emit(e)
			case 'b':
				emit('\b')
			case 'f':
				emit('\f')
			case 'n':
				emit('\n')
			case 'r':
				emit('\r')
			case 't':
				emit('\t')
			case 'u':
				if !s.fill(6) {
					return nil, info, s.ended()
				}
				r, ok := hex4(s.buf[s.pos+2 : s.pos+6])
				if !ok {
					s.pos += 2
					return nil, info, s.syntax(`invalid \u escape`)
				}
				if !utf16.IsSurrogate(r) {
					emitRune(r)
					s.pos += 6
					continue
				}
				if r < 0xdc00 && s.fill(12) && s.buf[s.pos+6] == '\\' && s.buf[s.pos+7] == 'u' {
					if lo, ok := hex4(s.buf[s.pos+8 : s.pos+12]); ok && lo >= 0xdc00 && lo <= 0xdfff {
						emitRune(utf16.DecodeRune(r, lo))
						s.pos += 12
						continue
					}
				}
				info.bad = true // a lone surrogate stands for no character
				emitRune(utf8.RuneError)
				s.pos += 6
				continue
			default:
				s.pos++
				return nil, info, s.syntax("invalid escape %s in string", quoteByte(e))
			}
			s.pos += 2
		case c < 0x20:
			return nil, info, s.syntax("invalid control character %s in string", quoteByte(c))
		case c < utf8.RuneSelf:
			emit(c)
			s.pos++
		default:
			s.fill(utf8.UTFMax) // fewer at the end of the input
			r, size := utf8.DecodeRune(s.buf[s.pos:s.end])
			if r == utf8.RuneError && size == 1 {
				info.bad = true
				emitRune(utf8.RuneError)
			} else {
				emit(s.buf[s.pos : s.pos+size]...)
			}
			s.pos += size
		}
	}
}

// skipString consumes the rest of a string whose opening quote was
// consumed, checking its syntax only.
func (s *jsonScanner) skipString() error {
	for {
		for s.pos < s.end {
			c := s.buf[s.pos]
			switch {
			case c == '"':
				s.pos++
				return nil
			case c == '\\':
				if !s.fill(2) {
					return s.ended()
				}
				switch e := s.buf[s.pos+1]; e {
				case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
					s.pos += 2
				case 'u':
					if !s.fill(6) {
						return s.ended()
					}
					if _, ok := hex4(s.buf[s.pos+2 : s.pos+6]); !ok {
						s.pos += 2
						return s.syntax(`invalid \u escape`)
					}
					s.pos += 6
				default:
					s.pos++
					return s.syntax("invalid escape %s in string", quoteByte(e))
				}
			case c < 0x20:
				return s.syntax("invalid control character %s in string", quoteByte(c))
			default:
				s.pos++
			}
		}
		if !s.fill(1) {
			return s.ended()
		}
	}
}

// skipValue consumes one value whose first byte c was consumed, at nesting
// depth depth (the containers around it), checking its syntax only.
func (s *jsonScanner) skipValue(c byte, depth int) error {
	s.stack = s.stack[:0]
	for {
		// One value starting with c.
		switch {
		case c == '{' || c == '[':
			if depth+len(s.stack)+1 > maxJSONDepth {
				return s.syntax("nesting deeper than %d", maxJSONDepth)
			}
			closing := byte('}')
			if c == '[' {
				closing = ']'
			}
			s.stack = append(s.stack, closing)
			var err error
			if c, err = s.next(); err != nil {
				return err
			}
			if c == closing {
				s.stack = s.stack[:len(s.stack)-1]
				break // an empty container: on to what follows it
			}
			if closing == '}' {
				if c, err = s.memberValue(c); err != nil {
					return err
				}
			}
			continue // the first element or member value
		case c == '"':
			if err := s.skipString(); err != nil {
				return err
			}
		case c == 't':
			if err := s.literal("rue"); err != nil {
				return err
			}
		case c == 'f':
			if err := s.literal("alse"); err != nil {
				return err
			}
		case c == 'n':
			if err := s.literal("ull"); err != nil {
				return err
			}
		case c == '-' || c >= '0' && c <= '9':
			if _, _, err := s.number(c, false, 0); err != nil {
				return err
			}
		default:
			return s.unexpected(c, "the start of a value")
		}
		// What follows a value inside the containers: a comma and the
		// next element or member, or the container's end.
		for {
			if len(s.stack) == 0 {
				return nil
			}
			closing := s.stack[len(s.stack)-1]
			var err error
			if c, err = s.next(); err != nil {
				return err
			}
			if c == closing {
				s.stack = s.stack[:len(s.stack)-1]
				continue
			}
			if c != ',' {
				return s.unexpected(c, fmt.Sprintf("',' or %q", rune(closing)))
			}
			if c, err = s.next(); err != nil {
				return err
			}
			if closing == '}' {
				if c, err = s.memberValue(c); err != nil {
					return err
				}
			}
			break
		}
	}
}

// memberValue skips an object member's key, whose first byte c was
// consumed, and its colon, and returns the first byte of its value.
func (s *jsonScanner) memberValue(c byte) (byte, error) {
	if c != '"' {
		return 0, s.unexpected(c, "a string (an object key)")
	}
	if err := s.skipString(); err != nil {
		return 0, err
	}
	if err := s.expect(':'); err != nil {
		return 0, err
	}
	return s.next()
}

// memberKey reads an object member's key, whose first byte c was consumed:
// up to maxKeyLen+1 bytes of it, enough to tell every known key from a
// longer one. The bytes alias the scanner's buffers (readString).
func (s *jsonScanner) memberKey(c byte) ([]byte, error) {
	if c != '"' {
		return nil, s.unexpected(c, "a string (an object key)")
	}
	key, _, err := s.readString(maxKeyLen + 1)
	return key, err
}

// afterMember consumes what follows an object member's value: a ',' and
// the first byte of the next member's key, or the object's '}'. It returns
// that byte.
func (s *jsonScanner) afterMember() (byte, error) {
	c, err := s.next()
	if err != nil {
		return 0, err
	}
	switch c {
	case ',':
		if c, err = s.next(); err != nil {
			return 0, err
		}
		if c == '}' {
			return 0, s.unexpected(c, "a string (an object key)")
		}
	case '}':
	default:
		return 0, s.unexpected(c, "',' or '}'")
	}
	return c, nil
}

// hex4 decodes the 4 hex digits at the start of b.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
