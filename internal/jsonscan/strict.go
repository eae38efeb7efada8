package jsonscan

import (
	"bytes"
	"strconv"
	"sync"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Strict reads the JSON value data, as Valid does, and returns the first thing in it that JSON readers
// may read in different ways: an object with a key given twice (one reader keeps the first value,
// another the last: a body checked as one thing would be acted on as another), or a \u escape of a
// UTF-16 surrogate that is not half of a pair (encoding/json reads U+FFFD, other readers keep it or
// refuse the body). Those errors are *DuplicateKeyError and *SurrogateError; a value that is not JSON
// gives its *SyntaxError, unless one of those came before it. It returns nil for a JSON value without
// either.
//
// Keys are compared decoded and without case, so "id", "\u0069d" and "ID" are the same key: readers
// that match keys to fields without case (encoding/json among them, and many web frameworks) take
// {"eventType":"A","EventType":"B"} as one key given twice, whose value they differ on. Case is Unicode
// simple case folding, as encoding/json's (the Kelvin sign is a K). Raw bytes that are not UTF-8 are
// compared as they are (check utf8.Valid first): like encoding/json, Strict accepts them. It allocates
// only for keys with escapes or bytes outside ASCII, objects of many keys and errors.
func Strict(data []byte) error {
	c := checkers.Get().(*strictChecker)
	defer checkers.Put(c)
	if c.clean(data) {
		return nil
	}
	return c.walk(data) // something is wrong: walk again, slowly, to say what and where
}

// walk returns Strict's error for data, or nil.
func (c *strictChecker) walk(data []byte) error {
	c.s.Reset(data)
	c.keys, c.where = c.keys[:0], c.where[:0]
	err := c.value()
	if err == nil {
		err = c.s.End()
	}
	if located, ok := err.(interface{ prepend(string) }); ok {
		for _, elem := range c.where { // collected innermost first, on the way back up
			located.prepend(elem)
		}
	}
	c.s.Reset(nil) // keep no reference to data
	clear(c.keys[:cap(c.keys)])
	return err
}

// checkers keeps the checkers' lists for the next check: a check then allocates nothing.
var checkers = sync.Pool{New: func() any {
	return &strictChecker{keys: make([][]byte, 0, 64), frames: make([]frame, 0, 16)}
}}

// DuplicateKeyError reports an object with a key given twice.
type DuplicateKeyError struct {
	Offset int    // of the second key's opening quote
	Key    string // the second key, decoded
	First  string // the first, decoded: Key, or Key in other case
	Path   string // the object's place in the value ("event.observation", "seals[3]"); "" for the value itself
}

func (e *DuplicateKeyError) Error() string {
	if e.First != e.Key {
		return "the keys " + strconv.Quote(e.First) + " and " + strconv.Quote(e.Key) + ", one key but for case, are both in " +
			where(e.Path) + " (the second at byte " + strconv.Itoa(e.Offset) + ")"
	}
	return "the key " + strconv.Quote(e.Key) + " is given twice in " + where(e.Path) + " at byte " + strconv.Itoa(e.Offset)
}

func (e *DuplicateKeyError) prepend(elem string) { e.Path = joinPath(elem, e.Path) }

// SurrogateError reports a \u escape of a UTF-16 surrogate without its other half: it stands for no
// character, so the string it is in is not valid UTF-8 once decoded.
type SurrogateError struct {
	Offset int    // of the escape's backslash
	Escape string // as written: `\ud800`
	Path   string // the string's place in the value (a key's: its object's); "" for the value itself
}

func (e *SurrogateError) Error() string {
	return "the escape " + e.Escape + " in " + where(e.Path) + " at byte " + strconv.Itoa(e.Offset) +
		" is an unpaired UTF-16 surrogate"
}

func (e *SurrogateError) prepend(elem string) { e.Path = joinPath(elem, e.Path) }

func where(path string) string {
	if path == "" {
		return "the value"
	}
	return path
}

// joinPath puts the element elem (a key, or an array index as "[3]") before path.
func joinPath(elem, path string) string {
	switch {
	case path == "":
		return elem
	case path[0] == '[':
		return elem + path
	}
	return elem + "." + path
}

// pathKey is a key as a path names it: as it is when it is a plain word, else quoted.
func pathKey(key []byte) string {
	for _, c := range key {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(string(key))
		}
	}
	if len(key) == 0 {
		return `""`
	}
	return string(key)
}

// manyKeys is the number of keys from which an object's keys are looked up in a map rather than one
// by one, so that an object of thousands of keys costs linear time.
const manyKeys = 32

type strictChecker struct {
	s      Scanner
	keys   [][]byte // the keys, decoded, of the objects open, the innermost's last
	where  []string // the path to an error, innermost first, collected as the walk unwinds
	frames []frame  // clean's containers open, the innermost last
}

// frame is a container open in clean.
type frame struct {
	object bool
	first  int                 // an object's first key in keys
	seen   uint64              // an object's keys so far, one bit each of a small hash (see keyBit)
	set    map[string]struct{} // an object's keys, once there are manyKeys of them
}

// keyBit is the bit of a key in frame.seen: two keys with different bits differ (sameKey), so most keys
// of an object are told apart from the others without comparing them. It is made of the key's length,
// first and last character as folded (appendFold), which it reads without copying the key.
func keyBit(key []byte) uint64 {
	if len(key) == 0 {
		return 1
	}
	var n, first, last uint
	if isASCII(key) {
		n, first, last = uint(len(key)), uint(upper(key[0])), uint(upper(key[len(key)-1]))
	} else {
		for i := 0; i < len(key); {
			r, size, w := foldAt(key, i)
			if i == 0 {
				first = uint(r)
			}
			n, last = n+uint(w), uint(r)
			i += size
		}
	}
	return 1 << ((n*7 + first + last*3) & 63)
}

// sameKey reports whether a and b are one key: equal under simple case folding (see Strict). It copies
// neither.
func sameKey(a, b []byte) bool {
	if isASCII(a) && isASCII(b) {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if upper(a[i]) != upper(b[i]) {
				return false
			}
		}
		return true
	}
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		ra, sa, _ := foldAt(a, i)
		rb, sb, _ := foldAt(b, j)
		if ra != rb {
			return false
		}
		i, j = i+sa, j+sb
	}
	return i == len(a) && j == len(b)
}

// foldedKey is key as frame.set holds it: one spelling for all its cases.
func foldedKey(key []byte) string { return string(appendFold(nil, key)) }

// appendFold appends key with every character in the one case that stands for all of its cases (the
// least rune of its simple folding orbit: upper case in ASCII), and bytes that are not UTF-8 as they are.
func appendFold(dst, key []byte) []byte {
	for i := 0; i < len(key); {
		r, size, _ := foldAt(key, i)
		if r > unicode.MaxRune {
			dst = append(dst, key[i]) // not UTF-8: as it is
		} else {
			dst = utf8.AppendRune(dst, r)
		}
		i += size
	}
	return dst
}

// foldAt returns the character at key[i] folded (appendFold), its size in key and its size folded. A byte
// that is not UTF-8 is returned as a rune beyond unicode.MaxRune, one of its own for each byte value.
func foldAt(key []byte, i int) (r rune, size, folded int) {
	if c := key[i]; c < utf8.RuneSelf {
		return rune(upper(c)), 1, 1
	}
	r, size = utf8.DecodeRune(key[i:])
	if r == utf8.RuneError && size == 1 {
		return unicode.MaxRune + 1 + rune(key[i]), 1, 1
	}
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return least, size, utf8.RuneLen(least)
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// clean reports whether data is one JSON value without a key given twice or an unpaired surrogate
// escape. It is the fast path of Strict: one loop over the bytes, as skipValue's, which only notices;
// a false sends Strict to the walk that words the problem.
func (c *strictChecker) clean(data []byte) bool {
	var (
		i   = skipSpace(data, 0)
		n   = len(data)
		err error
		esc bool
	)
	c.frames, c.keys = c.frames[:0], c.keys[:0]
	defer func() {
		clear(c.frames[:cap(c.frames)])
		clear(c.keys[:cap(c.keys)])
	}()

value: // data[i] (white space skipped) should begin a value
	if i >= n {
		return false
	}
	switch ch := data[i]; ch {
	case '"':
		start := i + 1
		i = skipPlain(data, start)
		if i < n && data[i] == '"' {
			i++
		} else if i, esc, err = scanString(data, i); err != nil {
			return false
		} else if esc && loneSurrogate(data[start:i-1]) >= 0 {
			return false
		}
	case '{', '[':
		if len(c.frames) >= MaxDepth {
			return false
		}
		c.frames = append(c.frames, frame{object: ch == '{', first: len(c.keys)})
		i = skipSpace(data, i+1)
		if ch == '{' {
			if i < n && data[i] == '}' {
				i++
				c.frames = c.frames[:len(c.frames)-1]
				goto next
			}
			goto key
		}
		if i < n && data[i] == ']' {
			i++
			c.frames = c.frames[:len(c.frames)-1]
			goto next
		}
		goto value
	default:
		if i, err = skipValue(data, i, len(c.frames)); err != nil {
			return false
		}
	}

next: // a value ended just before data[i]
	if len(c.frames) == 0 {
		return skipSpace(data, i) == n
	}
	i = skipSpace(data, i)
	if i >= n {
		return false
	}
	if f := &c.frames[len(c.frames)-1]; f.object {
		switch data[i] {
		case ',':
			i = skipSpace(data, i+1)
			goto key
		case '}':
			i++
			c.keys = c.keys[:f.first]
			c.frames = c.frames[:len(c.frames)-1]
			goto next
		}
		return false
	}
	switch data[i] {
	case ',':
		i = skipSpace(data, i+1)
		goto value
	case ']':
		i++
		c.frames = c.frames[:len(c.frames)-1]
		goto next
	}
	return false

key: // data[i] (white space skipped) should begin an object key
	if i >= n || data[i] != '"' {
		return false
	}
	{
		start := i + 1
		i = skipPlain(data, start)
		if i < n && data[i] == '"' {
			i++
			esc = false
		} else if i, esc, err = scanString(data, i); err != nil {
			return false
		}
		key := data[start : i-1]
		if esc {
			if loneSurrogate(key) >= 0 {
				return false
			}
			key = AppendUnquote(nil, key)
		}
		if !c.newKey(&c.frames[len(c.frames)-1], key) {
			return false
		}
	}
	i = skipSpace(data, i)
	if i >= n || data[i] != ':' {
		return false
	}
	i = skipSpace(data, i+1)
	goto value
}

// newKey records key in the object f and reports whether it is new there.
func (c *strictChecker) newKey(f *frame, key []byte) bool {
	if f.set != nil {
		folded := foldedKey(key)
		if _, dup := f.set[folded]; dup {
			return false
		}
		f.set[folded] = struct{}{}
		return true
	}
	if bit := keyBit(key); f.seen&bit == 0 {
		f.seen |= bit
	} else {
		for _, k := range c.keys[f.first:] {
			if sameKey(k, key) {
				return false
			}
		}
	}
	c.keys = append(c.keys, key)
	if len(c.keys)-f.first == manyKeys {
		f.set = make(map[string]struct{}, 2*manyKeys)
		for _, k := range c.keys[f.first:] {
			f.set[foldedKey(k)] = struct{}{}
		}
		c.keys = c.keys[:f.first]
	}
	return true
}

// value checks the value that comes next.
func (c *strictChecker) value() error {
	switch c.s.Kind() {
	case Object:
		return c.object()
	case Array:
		c.s.Array()
		for n := 0; c.s.Elem(); n++ {
			if err := c.value(); err != nil {
				c.where = append(c.where, "["+strconv.Itoa(n)+"]")
				return err
			}
		}
	case String:
		start := c.s.Offset() + 1
		if raw, esc := c.s.String(); esc {
			if i := loneSurrogate(raw); i >= 0 {
				return &SurrogateError{Offset: start + i, Escape: string(raw[i : i+6])}
			}
		}
	default:
		c.s.Skip()
	}
	return nil // a syntax error stays in the scanner
}

// object checks the object that comes next.
func (c *strictChecker) object() error {
	first := len(c.keys)
	defer func() { c.keys = c.keys[:first] }()
	var set map[string][]byte // the keys, once there are manyKeys of them, by their folded spelling
	c.s.Object()
	for {
		at := c.s.Offset()
		raw, esc, ok := c.s.Member()
		if !ok {
			return nil
		}
		at = skipSpace(c.s.data, at)
		if c.s.data[at] == ',' {
			at = skipSpace(c.s.data, at+1)
		}
		key := raw
		if esc {
			if i := loneSurrogate(raw); i >= 0 {
				return &SurrogateError{Offset: at + 1 + i, Escape: string(raw[i : i+6])}
			}
			key = AppendUnquote(nil, raw)
		}
		var before []byte // the same key, given before, when dup
		dup := false
		if set != nil {
			folded := foldedKey(key)
			if before, dup = set[folded]; !dup {
				set[folded] = key
			}
		} else {
			for _, k := range c.keys[first:] {
				if sameKey(k, key) {
					before, dup = k, true
					break
				}
			}
			c.keys = append(c.keys, key)
			if len(c.keys)-first == manyKeys {
				set = make(map[string][]byte, 2*manyKeys)
				for _, k := range c.keys[first:] {
					if _, ok := set[foldedKey(k)]; !ok {
						set[foldedKey(k)] = k
					}
				}
			}
		}
		if dup {
			return &DuplicateKeyError{Offset: at, Key: string(key), First: string(before)}
		}
		if err := c.value(); err != nil {
			c.where = append(c.where, pathKey(key))
			return err
		}
	}
}

// loneSurrogate returns the index in the string body raw of the first \u escape of a surrogate that is
// not half of a pair, or -1.
func loneSurrogate(raw []byte) int {
	for i := bytes.IndexByte(raw, '\\'); i >= 0 && i+1 < len(raw); {
		if raw[i+1] != 'u' {
			i += 2 // \" \\ \/ \b \f \n \r \t
		} else {
			r := getu4(raw[i:])
			switch {
			case !utf16.IsSurrogate(r):
				i += 6
			case r < 0xdc00 && utf16.DecodeRune(r, getu4(raw[i+6:])) != 0xfffd:
				i += 12 // a high surrogate and its low one
			default:
				return i
			}
		}
		j := bytes.IndexByte(raw[i:], '\\')
		if j < 0 {
			break
		}
		i += j
	}
	return -1
}
