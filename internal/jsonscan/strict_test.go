package jsonscan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unicode/utf16"
	"unicode/utf8"
)

// TestStrict: keys given twice at any depth, however escaped, and unpaired surrogate escapes are found,
// with their place; everything else valid passes, and invalid JSON gives its syntax error.
func TestStrict(t *testing.T) {
	many := func(dupAt int) string { // an object of 100 keys, the last one a repeat of key dupAt (-1: none)
		var b strings.Builder
		b.WriteString(`{"x":{`)
		for i := range 100 {
			fmt.Fprintf(&b, `"k%d":%d,`, i, i)
		}
		if dupAt >= 0 {
			fmt.Fprintf(&b, `"k%d":0}}`, dupAt)
		} else {
			b.WriteString(`"last":0}}`)
		}
		return b.String()
	}
	for _, tc := range []struct{ in, want string }{
		{event, ""},
		{`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":2}]}`, ""},
		{`{"id":"A","İd":"C","ıd":"D"}`, ""}, // dotted capital and dotless small i fold to no ASCII i
		{`{"é":1,"e":2,"\u00e9\u0301":3}`, ""},
		{`{"id":"A","ID":"B"}`, `duplicate "ID" (first "id") at "" byte 10`},
		{`{"eventType":"A","x":{},"EventType":"B"}`, `duplicate "EventType" (first "eventType") at "" byte 24`},
		{`{"kind":1,"\u212aIND":2}`, "duplicate \"\u212aIND\" (first \"kind\") at \"\" byte 10"}, // the Kelvin sign
		{`{"a":{"s":1,"ſ":2}}`, `duplicate "ſ" (first "s") at "a" byte 12`},
		{`{"É":1,"é":2}`, `duplicate "é" (first "É") at "" byte 8`},
		{`{"\u00c9":1,"é":2}`, `duplicate "é" (first "É") at "" byte 12`},
		{`{"a":"\ud83d\ude00","b":"\\ud800","c":"\u00e9\n"}`, ""},
		{`"\ud83d\ude00"`, ""},
		{many(-1), ""},
		{`{"id":"A","id":"B"}`, `duplicate "id" at "" byte 10`},
		{`{"id":"A", "i\u0064":"B"}`, `duplicate "id" at "" byte 11`},
		{`{"a":{"x":1,"y":{},"x":2}}`, `duplicate "x" at "a" byte 19`},
		{`{"e":{"s":[{"n":1},{"n":1,"n":2}]}}`, `duplicate "n" at "e.s[1]" byte 26`},
		{`[[{"k\n":0,"k\u000a":1}]]`, `duplicate "k\n" at "[0][0]" byte 11`},
		{`{"a b":{"":1,"":2}}`, `duplicate "" at "\"a b\"" byte 13`},
		{many(3), `duplicate "k3" at "x" byte 886`},
		{many(99), `duplicate "k99" at "x" byte 886`},
		{strings.Replace(many(7), `"k7":0}}`, `"K7":0}}`, 1), `duplicate "K7" (first "k7") at "x" byte 886`},
		{`{"id":"\ud800"}`, `surrogate \ud800 at "id" byte 7`},
		{`{"id":"x\udc00y"}`, `surrogate \udc00 at "id" byte 8`},
		{`{"id":"\ud800\u0041"}`, `surrogate \ud800 at "id" byte 7`},
		{`{"id":"\ud800\ud800"}`, `surrogate \ud800 at "id" byte 7`},
		{`{"id":"\\\ud800"}`, `surrogate \ud800 at "id" byte 9`},
		{`{"a":[1,"\uDBFF"]}`, `surrogate \uDBFF at "a[1]" byte 9`},
		{`{"\ud800":1}`, `surrogate \ud800 at "" byte 2`},
		{`{"id":"A","id":`, `duplicate "id" at "" byte 10`}, // the first problem found
		{`{"id":"A","di":`, "invalid JSON at byte 15: unexpected end of input"},
		{`{"a":1}{`, "invalid JSON at byte 7: invalid character '{' after top-level value"},
	} {
		err := Strict([]byte(tc.in))
		var got string
		var dup *DuplicateKeyError
		var sur *SurrogateError
		switch {
		case errors.As(err, &dup) && dup.First != dup.Key:
			got = fmt.Sprintf("duplicate %q (first %q) at %q byte %d", dup.Key, dup.First, dup.Path, dup.Offset)
		case errors.As(err, &dup):
			got = fmt.Sprintf("duplicate %q at %q byte %d", dup.Key, dup.Path, dup.Offset)
		case errors.As(err, &sur):
			got = fmt.Sprintf("surrogate %s at %q byte %d", sur.Escape, sur.Path, sur.Offset)
		case err != nil:
			got = err.Error()
		}
		if got != tc.want {
			t.Errorf("Strict(%.60s)\n got %s\nwant %s", tc.in, got, tc.want)
		}
	}
}

// TestStrictAllocs: checking a valid body without escaped keys allocates nothing, keys outside ASCII
// (compared without case) included. It checks the fast path with a checker of its own: under -race
// sync.Pool drops a quarter of what it is given, and the pool's new checkers would count.
func TestStrictAllocs(t *testing.T) {
	c := checkers.New().(*strictChecker)
	for _, s := range []string{event, `{"é":1,"É1":2,"ünd":{"ñ":3,"Ñ1":4},"Kelvin":5,"kelvin1":6}`} {
		data := []byte(s)
		if n := testing.AllocsPerRun(100, func() {
			if !c.clean(data) {
				t.Fatalf("refused %.40s", data)
			}
		}); n != 0 {
			t.Errorf("%v allocations per check of %.40s", n, data)
		}
	}
}

// FuzzStrict compares Strict with encoding/json's reading: an error for everything json.Valid refuses
// (a syntax error, or a problem found before it), never a syntax error for what it accepts, a key given twice exactly where a token reader finds one, an unpaired surrogate exactly
// where an escape decodes to U+FFFD that no other escape or byte explains.
func FuzzStrict(f *testing.F) {
	for _, s := range []string{event, `{"a":{"b":1,"b":2}}`, `["\ud800"]`, `{"\u0061":1,"a":2}`, `{"a":"\ud83d\ude00"}`,
		`{"id":1,"ID":2}`, `{"kind":1,"\u212aind":2}`, `{"\u00e9":1,"É":2}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := Strict(data)
		var c strictChecker
		if clean, walked := c.clean(data), c.walk(data); clean != (walked == nil) {
			t.Fatalf("%q: the fast path says clean %v, the walk %v", data, clean, walked)
		}
		var se *SyntaxError
		if valid := json.Valid(data); valid && errors.As(err, &se) || !valid && err == nil {
			t.Fatalf("%q: Strict %v, json.Valid %v", data, err, valid)
		}
		if !json.Valid(data) || !utf8.Valid(data) {
			return // bytes that are not UTF-8 Strict compares as they are; encoding/json reads U+FFFD for each
		}
		dup, sur := refStrict(data)
		var de *DuplicateKeyError
		var sue *SurrogateError
		switch {
		case errors.As(err, &sue):
			if !sur {
				t.Fatalf("%q: %v, but no unpaired surrogate", data, err)
			}
		case errors.As(err, &de):
			if !dup {
				t.Fatalf("%q: %v, but no key twice", data, err)
			}
		case dup || sur:
			t.Fatalf("%q: Strict found nothing; duplicate %v, surrogate %v", data, dup, sur)
		}
	})
}

// refStrict reads valid JSON with encoding/json's token reader and reports whether an object has a key
// twice (strings.EqualFold), and whether a string (key or value) has an unpaired surrogate escape.
func refStrict(data []byte) (dup, sur bool) {
	type frame struct {
		keys   []string
		object bool
		key    bool
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return dup, sur || rawSurrogate(data)
		}
		top := len(stack) - 1
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				if top >= 0 && stack[top].object {
					stack[top].key = true
				}
				stack = append(stack, frame{object: d == '{', key: d == '{'})
			} else {
				stack = stack[:top]
			}
			continue
		}
		if s, ok := tok.(string); ok && top >= 0 && stack[top].object && stack[top].key {
			for _, k := range stack[top].keys {
				dup = dup || strings.EqualFold(k, s)
			}
			stack[top].keys = append(stack[top].keys, s)
			stack[top].key = false
			continue
		}
		if top >= 0 && stack[top].object {
			stack[top].key = true
		}
	}
}

// rawSurrogate reports whether data, valid JSON, has a \u escape of a surrogate not paired with the
// next escape, reading escapes by themselves (in valid JSON a backslash outside strings is impossible).
func rawSurrogate(data []byte) bool {
	for i := 0; i+1 < len(data); i++ {
		if data[i] != '\\' {
			continue
		}
		if data[i+1] != 'u' {
			i++
			continue
		}
		r := getu4(data[i:])
		if utf16.IsSurrogate(r) {
			if r >= 0xdc00 || utf16.DecodeRune(r, getu4(data[i+6:])) == 0xfffd {
				return true
			}
			i += 6
		}
		i += 5
	}
	return false
}

// BenchmarkStrict compares Strict with Valid, the plain pass over the same bytes, on the event of the
// scanner's benchmark: the difference is the cost of tracking keys and escapes.
func BenchmarkStrict(b *testing.B) {
	data := []byte(event)
	for _, bm := range []struct {
		name string
		fn   func([]byte) bool
	}{
		{"Valid", Valid},
		{"Strict", func(d []byte) bool { return Strict(d) == nil }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				if !bm.fn(data) {
					b.Fatal("refused")
				}
			}
		})
	}
}

// BenchmarkStrictFoldingKeys checks the body a case-insensitive comparison of keys is at its worst on:
// about 256 KiB of objects of 31 long Greek keys (each character folded through a case orbit of four),
// alike but for one character, the last object with a key given twice in other case. Keys are compared
// only when their hashes match, so it costs time linear in the body; Valid reads the same body.
func BenchmarkStrictFoldingKeys(b *testing.B) {
	const distinct = "abcdefghijklmnopqrstuvwxyz01234"
	key := strings.Repeat("ι", 200)
	object := func(last string) string {
		var o strings.Builder
		o.WriteString("{")
		for j := range 31 {
			if j > 0 {
				o.WriteString(",")
			}
			c := distinct[j : j+1]
			if j == 30 {
				c = last
			}
			o.WriteString(`"` + key + c + `Z":0`)
		}
		return o.String() + "}"
	}
	var body strings.Builder
	body.WriteString("[")
	for body.Len() < 250<<10 {
		body.WriteString(object("4") + ",")
	}
	body.WriteString(object("A") + "]") // "…AZ" is "…aZ" in other case
	data := []byte(body.String())
	var dup *DuplicateKeyError
	if err := Strict(data); !errors.As(err, &dup) || dup.First == dup.Key {
		b.Fatalf("Strict: %v, want the key given twice in other case", err)
	}
	for _, bm := range []struct {
		name string
		fn   func([]byte)
	}{
		{"Valid", func(d []byte) { Valid(d) }},
		{"Strict", func(d []byte) { _ = Strict(d) }},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				bm.fn(data)
			}
		})
	}
}
