package serve

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
)

// The stream /bytes/N serves is cheap to produce and still checkable byte
// by byte: one precomputed block of pseudo-random bytes, repeated, with
// each repetition (a chunk) starting with a stamp, its own offset in the
// stream as a big-endian uint64. The block's bytes catch a shift or a
// corruption within a chunk (they do not repeat at any period shorter than
// the chunk); the stamps catch a whole chunk lost, repeated or reordered.
// Since byte p depends only on p, a client checks any range it received
// without the bytes before it. Producing it costs one copy per byte and a
// store per chunk (Pattern's WriteTo, which the HTTP handler uses, skips
// even the copy: its window is filled once and only its stamps change), so
// a transfer measures the network stack, not the generator (the ChaCha8
// stream it replaced held even the kernel's own sockets to about half of
// what they move with this one, scripts/http.sh).
const (
	// BodyChunk is the period of the stream: 4 KiB, one page, so that a
	// misplaced page shows in its stamp.
	BodyChunk = 4096
	// stampLen is the size of the offset stamp heading each chunk.
	stampLen = 8
	// bodyWindow is what Pattern's WriteTo hands to each Write: 256 KiB,
	// large enough that the conn's per-write costs (the endpoint lock,
	// waking the sender) are spread over many segments, and a multiple
	// of BodyChunk, so that every window starts with a stamp. Measured
	// with scripts/http.sh against the same handler with other sizes,
	// alternating: ustack's download with 64 KiB windows at 0.78x of
	// 256 KiB's, with 1 MiB windows at 0.87x.
	bodyWindow = 64 * BodyChunk
)

// patternSeed seeds the block of the stream.
var patternSeed = [32]byte{'u', 's', 't', 'a', 'c', 'k'}

// bodyBlock is the block every chunk repeats after its stamp (its first
// stampLen bytes are unused: the stamp replaces them).
var bodyBlock = func() (b [BodyChunk]byte) {
	rand.NewChaCha8(patternSeed).Read(b[:])
	return b
}()

// fillBody writes the stream's bytes from offset off into b.
func fillBody(b []byte, off int64) {
	for len(b) > 0 {
		in := off % BodyChunk
		n := copy(b, bodyBlock[in:])
		if in < stampLen {
			var stamp [stampLen]byte
			binary.BigEndian.PutUint64(stamp[:], uint64(off-in))
			copy(b[:n], stamp[in:])
		}
		b = b[n:]
		off += int64(n)
	}
}

// Pattern returns a reader of the first n bytes of the stream /bytes/N
// serves (see BodyChunk). CheckBody checks a received copy.
func Pattern(n int64) io.Reader {
	return &pattern{left: n}
}

type pattern struct {
	off, left int64
}

// Read implements io.Reader.
func (p *pattern) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	fillBody(b, p.off)
	p.off += int64(len(b))
	p.left -= int64(len(b))
	return len(b), nil
}

// WriteTo implements io.WriterTo, which io.Copy prefers: it writes the
// rest of the stream in windows of bodyWindow bytes from one buffer,
// filled once, restamping each chunk between writes.
func (p *pattern) WriteTo(w io.Writer) (int64, error) {
	if p.left <= 0 {
		return 0, nil
	}
	buf := make([]byte, min(p.left+p.off%BodyChunk, bodyWindow))
	// Align the window to a chunk, so that only stamps change between
	// windows; the first write skips the bytes before p.off.
	base := p.off - p.off%BodyChunk
	fillBody(buf, base)
	skip := p.off - base
	stamped := base // the offset buf holds the stream of
	var total int64
	for p.left > 0 {
		if stamped != base { // a later window: buf is whole chunks
			stamped = base
			for i := 0; i < len(buf); i += BodyChunk {
				binary.BigEndian.PutUint64(buf[i:], uint64(base+int64(i)))
			}
		}
		b := buf[skip:]
		if int64(len(b)) > p.left {
			b = b[:p.left]
		}
		n, err := w.Write(b)
		total += int64(n)
		p.off += int64(n)
		p.left -= int64(n)
		if err != nil {
			return total, err
		}
		if n < len(b) {
			return total, io.ErrShortWrite
		}
		base += int64(len(buf))
		skip = 0
	}
	return total, nil
}

// ErrBodyMismatch is what CheckBody's errors wrap when the bytes differ
// from the stream (rather than failing to arrive).
var ErrBodyMismatch = errors.New("serve: body is not the /bytes/N stream")

// CheckBody reads r to its end and checks that it is exactly the first n
// bytes of the stream /bytes/N serves (what Pattern(n) reads). Its error
// names the first wrong offset, or says how many bytes arrived; it wraps
// ErrBodyMismatch for wrong or surplus bytes, and r's own error for a read
// that failed.
func CheckBody(r io.Reader, n int64) error {
	return checkBody(r, 0, n)
}

// checkBody checks that r reads the n bytes of the stream from offset off.
func checkBody(r io.Reader, off, n int64) error {
	got := make([]byte, bodyWindow)
	want := make([]byte, bodyWindow)
	end := off + n
	for off < end {
		m, err := r.Read(got[:min(int64(len(got)), end-off)])
		if m > 0 {
			fillBody(want[:m], off)
			if !bytes.Equal(got[:m], want[:m]) {
				i := int64(0)
				for got[i] == want[i] {
					i++
				}
				return fmt.Errorf("%w: byte %d is %#02x, want %#02x (chunk stamped %d)", ErrBodyMismatch, off+i, got[i], want[i], stampOf(got[:m], off, off+i))
			}
			off += int64(m)
		}
		if err == io.EOF {
			if off < end {
				return fmt.Errorf("serve: body ended after %d of %d bytes: %w", off, end, io.ErrUnexpectedEOF)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("serve: body after %d of %d bytes: %w", off, end, err)
		}
	}
	// Nothing may follow the n bytes.
	var extra [1]byte
	for {
		m, err := r.Read(extra[:])
		if m > 0 {
			return fmt.Errorf("%w: more than the %d bytes asked for", ErrBodyMismatch, end)
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("serve: body after its %d bytes: %w", end, err)
		}
	}
}

// stampOf returns the stamp received for the chunk holding stream offset
// at, from b (which holds the stream from offset from), or -1 if b does
// not hold that whole stamp: a stamp tells where a misplaced chunk came
// from.
func stampOf(b []byte, from, at int64) int64 {
	start := at - at%BodyChunk - from
	if start < 0 || start+stampLen > int64(len(b)) {
		return -1
	}
	return int64(binary.BigEndian.Uint64(b[start:]))
}
