package jsonscan

import (
	"bytes"
	"hash/maphash"
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
// compared as they are (check utf8.Valid first): like encoding/json, Strict accepts them. Keys are compared
// only when a hash of their folded characters (seeded anew in every process) is equal, so any body costs
// time linear in its size. It allocates only for keys with escapes, objects of many keys and errors.
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
	c.keys, c.hashes, c.where = c.keys[:0], c.hashes[:0], c.where[:0]
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
	return &strictChecker{keys: make([][]byte, 0, 64), hashes: make([]uint64, 0, 64), frames: make([]frame, 0, 16)}
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
	hashes []uint64 // their hashes (keyHash), 0 where clean has not needed one yet
	where  []string // the path to an error, innermost first, collected as the walk unwinds
	frames []frame  // clean's containers open, the innermost last
}

// frame is a container open in clean.
type frame struct {
	object bool
	first  int                 // an object's first key in keys
	seen   uint64              // an object's keys so far, one bit each (asciiBit, foldedHash)
	set    map[uint64][][]byte // an object's keys by hash, once there are manyKeys of them
}

// asciiBit and foldedHash give a key's bit in frame.seen, made of its length, first and last character
// as folded (foldAt): keys that are one key (sameKey) have one bit, and most keys of an object are told
// apart by it alone. A key of ASCII only has it at once; another key's takes a pass, which hashes it too.
func asciiBit(key []byte) uint8 {
	if len(key) == 0 {
		return 0
	}
	return bitOf(uint(len(key)), uint(upper(key[0])), uint(upper(key[len(key)-1])))
}

func bitOf(n, first, last uint) uint8 { return uint8((n*7 + first + last*3) & 63) }

// keySeed seeds keyHash, anew in every process, so that no body can be made of keys whose hashes collide.
var keySeed = maphash.MakeSeed()

// keyHash hashes key as folded (foldAt), in UTF-8 (a byte that is not UTF-8 as it is): keys that are one
// key (sameKey) have one hash, so keys with the same bit are compared only when their hashes are equal,
// and checking an object costs what reading its keys once does, whatever its keys.
func keyHash(key []byte) uint64 {
	h, _ := foldedHash(key)
	return h
}

// foldedHash returns keyHash and the key's bit (asciiBit) in one pass. The folded bytes go to the hash 64
// at a time, from the stack.
func foldedHash(key []byte) (uint64, uint8) {
	var buf [64]byte
	var h maphash.Hash
	n, long := 0, false
	var size, first, last uint
	for i := 0; i < len(key); {
		if n > len(buf)-utf8.UTFMax {
			if !long {
				h.SetSeed(keySeed)
				long = true
			}
			_, _ = h.Write(buf[:n])
			n = 0
		}
		r, w := foldAt(key, i)
		switch {
		case r > unicode.MaxRune: // a byte that is not UTF-8, as it is
			buf[n] = key[i]
			n++
			size++
		case r < utf8.RuneSelf:
			buf[n] = byte(r)
			n++
			size++
		default:
			m := utf8.EncodeRune(buf[n:], r)
			n += m
			size += uint(m)
		}
		if i == 0 {
			first = uint(r)
		}
		last = uint(r)
		i += w
	}
	bit := uint8(0)
	if len(key) > 0 {
		bit = bitOf(size, first, last)
	}
	if !long {
		return maphash.Bytes(keySeed, buf[:n]), bit
	}
	_, _ = h.Write(buf[:n])
	return h.Sum64(), bit
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
		ra, sa := foldAt(a, i)
		rb, sb := foldAt(b, j)
		if ra != rb {
			return false
		}
		i, j = i+sa, j+sb
	}
	return i == len(a) && j == len(b)
}

// foldAt returns the character at key[i] in the one case that stands for all of its cases (the least rune
// of its simple folding orbit: upper case in ASCII), and its size in key. A byte that is not UTF-8 is
// returned as a rune beyond unicode.MaxRune, one of its own for each byte value.
func foldAt(key []byte, i int) (r rune, size int) {
	if c := key[i]; c < utf8.RuneSelf {
		return rune(upper(c)), 1
	}
	r, size = utf8.DecodeRune(key[i:])
	if r == utf8.RuneError && size == 1 {
		return unicode.MaxRune + 1 + rune(key[i]), 1
	}
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return least, size
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
	c.frames, c.keys, c.hashes = c.frames[:0], c.keys[:0], c.hashes[:0]
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
			c.keys, c.hashes = c.keys[:f.first], c.hashes[:f.first]
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

// newKey records key in the object f and reports whether it is new there. Keys are compared only when
// their bits and then their hashes are equal; each key is hashed at most once.
func (c *strictChecker) newKey(f *frame, key []byte) bool {
	var h uint64 // 0: not hashed yet
	var bit uint8
	if isASCII(key) {
		bit = asciiBit(key)
	} else {
		h, bit = foldedHash(key)
	}
	hash := func() uint64 {
		if h == 0 {
			h = keyHash(key)
		}
		return h
	}
	if f.set != nil {
		hv := hash()
		for _, o := range f.set[hv] {
			if sameKey(o, key) {
				return false
			}
		}
		f.set[hv] = append(f.set[hv], key)
		return true
	}
	if f.seen&(1<<bit) != 0 {
		for i := f.first; i < len(c.keys); i++ {
			if c.hashes[i] == 0 {
				c.hashes[i] = keyHash(c.keys[i])
			}
			if c.hashes[i] == hash() && sameKey(c.keys[i], key) {
				return false
			}
		}
	}
	f.seen |= 1 << bit
	c.keys, c.hashes = append(c.keys, key), append(c.hashes, h)
	if len(c.keys)-f.first == manyKeys {
		f.set = make(map[uint64][][]byte, 2*manyKeys)
		for i := f.first; i < len(c.keys); i++ {
			if c.hashes[i] == 0 {
				c.hashes[i] = keyHash(c.keys[i])
			}
			f.set[c.hashes[i]] = append(f.set[c.hashes[i]], c.keys[i])
		}
		c.keys, c.hashes = c.keys[:f.first], c.hashes[:f.first]
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
	defer func() { c.keys, c.hashes = c.keys[:first], c.hashes[:first] }()
	var set map[uint64][][]byte // the keys by hash, once there are manyKeys of them
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
		h := keyHash(key)
		if set != nil {
			for _, k := range set[h] {
				if sameKey(k, key) {
					before, dup = k, true
					break
				}
			}
			if !dup {
				set[h] = append(set[h], key)
			}
		} else {
			for i := first; i < len(c.keys); i++ {
				if c.hashes[i] == h && sameKey(c.keys[i], key) {
					before, dup = c.keys[i], true
					break
				}
			}
			c.keys, c.hashes = append(c.keys, key), append(c.hashes, h)
			if len(c.keys)-first == manyKeys {
				set = make(map[uint64][][]byte, 2*manyKeys)
				for i := first; i < len(c.keys); i++ {
					set[c.hashes[i]] = append(set[c.hashes[i]], c.keys[i])
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
