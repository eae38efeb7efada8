package upstream

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

// TestBOMReader: one leading byte order mark is dropped, however the reads split it; anything else, a
// second mark or a stream that ends within a partial mark included, passes unchanged, and the body's
// error comes after the bytes read with it.
func TestBOMReader(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"mark", bom + "data: x\n\n", "data: x\n\n"},
		{"no mark", "data: x\n\n", "data: x\n\n"},
		{"only the first mark", bom + bom + "id: 1\n", bom + "id: 1\n"},
		{"the mark alone", bom, ""},
		{"empty", "", ""},
		{"a partial mark, then the end", bom[:2], bom[:2]},
		{"a partial mark, then other bytes", bom[:2] + "data", bom[:2] + "data"},
		{"the mark's first byte in another character", "\xef\xbc\x9a", "\xef\xbc\x9a"},
		{"a mark later on", "data: " + bom + "\n\n", "data: " + bom + "\n\n"},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"data+EOF": iotest.DataErrReader,
	}
	for _, tt := range tests {
		for rname, wrap := range readers {
			t.Run(tt.name+"/"+rname, func(t *testing.T) {
				got, err := io.ReadAll(newBOMReader(io.NopCloser(wrap(strings.NewReader(tt.in)))))
				if err != nil || string(got) != tt.want {
					t.Fatalf("read %q, %v; want %q", got, err, tt.want)
				}
			})
		}
	}
	// An error within a partial mark follows the bytes read before it.
	boom := errors.New("boom")
	r := newBOMReader(io.NopCloser(io.MultiReader(strings.NewReader(bom[:1]), iotest.ErrReader(boom))))
	got, err := io.ReadAll(r)
	if string(got) != bom[:1] || !errors.Is(err, boom) {
		t.Fatalf("read %q, %v; want the mark's first byte, then the error", got, err)
	}
}

// FuzzBOMReader: whatever the input and however it is split into reads, the reader hands on the input
// without its first three bytes when those are the mark, and unchanged otherwise.
func FuzzBOMReader(f *testing.F) {
	f.Add([]byte(bom+"data: x\n\n"), uint8(1))
	f.Add([]byte(bom+bom), uint8(2))
	f.Add([]byte("\xef\xbb"), uint8(0))
	f.Add([]byte("\xefdata"), uint8(3))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		var r io.Reader = bytes.NewReader(in)
		switch split % 4 {
		case 1:
			r = iotest.OneByteReader(r)
		case 2:
			r = iotest.HalfReader(r)
		case 3:
			r = iotest.DataErrReader(r)
		}
		got, err := io.ReadAll(newBOMReader(io.NopCloser(r)))
		if err != nil {
			t.Fatal(err)
		}
		if want := bytes.TrimPrefix(in, []byte(bom)); !bytes.Equal(got, want) {
			t.Fatalf("read %q from %q, want %q", got, in, want)
		}
	})
}
