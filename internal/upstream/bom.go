package upstream

import "io"

// bom is U+FEFF in UTF-8, the byte order mark.
const bom = "\uFEFF"

// bomReader strips one byte order mark from the start of a stream, as the SSE processing model decodes
// the stream (WHATWG HTML, "Parsing an event stream": one leading U+FEFF is ignored). Only the first is
// stripped: a second one stays and is part of the first field's name, as the standard has it. The mark may
// arrive split across reads, so the first bytes are read into head, at most three, until they are known to
// be the mark or not; then reads pass through.
type bomReader struct {
	io.ReadCloser
	head [len(bom)]byte
	n    int   // bytes in head
	off  int   // bytes of head handed on
	done bool  // head is decided: the mark was dropped (n == 0) or head holds the stream's first bytes
	err  error // the error of a read that decided head, returned once head is handed on
}

func newBOMReader(r io.ReadCloser) *bomReader { return &bomReader{ReadCloser: r} }

// Read implements io.Reader.
func (b *bomReader) Read(p []byte) (int, error) {
	for !b.done {
		k, err := b.ReadCloser.Read(b.head[b.n:])
		b.n += k
		switch {
		case string(b.head[:b.n]) != bom[:b.n]: // not the mark: these bytes are the stream's
			b.done = true
		case b.n == len(bom): // the mark: drop it
			b.n, b.done = 0, true
		}
		if err != nil {
			b.done, b.err = true, err
		}
	}
	if b.off < b.n {
		k := copy(p, b.head[b.off:b.n])
		b.off += k
		return k, nil
	}
	if b.err != nil {
		return 0, b.err
	}
	return b.ReadCloser.Read(p)
}
