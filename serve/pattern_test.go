package serve_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"

	"github.com/stretchr/testify/require"

	"github.com/ustack-dev/ustack/serve"
)

// readOnly hides a reader's WriteTo, so that io.Copy goes through Read.
type readOnly struct{ io.Reader }

// sizes straddle the stamp, chunk and WriteTo window boundaries.
var sizes = []int64{0, 1, 7, 8, 9, serve.BodyChunk - 1, serve.BodyChunk, serve.BodyChunk + 9, 64*serve.BodyChunk - 1, 64*serve.BodyChunk + 1, 3*64*serve.BodyChunk + 12345}

// TestPatternReadEqualsWriteTo: Read, in any sizes, and WriteTo, from any
// point, produce the same stream, stamped with each chunk's offset.
func TestPatternReadEqualsWriteTo(t *testing.T) {
	for _, n := range sizes {
		var viaWriteTo bytes.Buffer
		m, err := io.Copy(&viaWriteTo, serve.Pattern(n))
		require.NoError(t, err)
		require.Equal(t, n, m)
		viaRead, err := io.ReadAll(iotest.HalfReader(readOnly{serve.Pattern(n)}))
		require.NoError(t, err)
		require.True(t, bytes.Equal(viaRead, viaWriteTo.Bytes()), "n=%d", n)
		for off := int64(0); off+8 <= n; off += serve.BodyChunk {
			require.Equal(t, uint64(off), binary.BigEndian.Uint64(viaRead[off:]), "the stamp of the chunk at %d", off)
		}
		// A WriteTo after some Reads carries on where they stopped.
		for _, first := range []int64{1, 5, 13, serve.BodyChunk + 3} {
			if first > n {
				continue
			}
			p := serve.Pattern(n)
			head := make([]byte, first)
			_, err := io.ReadFull(p, head)
			require.NoError(t, err)
			var rest bytes.Buffer
			_, err = io.Copy(&rest, p)
			require.NoError(t, err)
			require.True(t, bytes.Equal(viaRead, append(head, rest.Bytes()...)), "n=%d, WriteTo after %d bytes read", n, first)
		}
	}
	// The block does not repeat within a chunk: no two chunks of a long
	// body are equal, and none equals the next one shifted by a byte.
	b, _ := io.ReadAll(serve.Pattern(4 * serve.BodyChunk))
	require.NotEqual(t, b[:serve.BodyChunk], b[serve.BodyChunk:2*serve.BodyChunk])
	require.NotEqual(t, b[8:serve.BodyChunk], b[9:serve.BodyChunk+1])
}

// TestCheckBody: the checker passes the stream and names each kind of
// damage.
func TestCheckBody(t *testing.T) {
	for _, n := range sizes {
		require.NoError(t, serve.CheckBody(serve.Pattern(n), n), "n=%d", n)
		require.NoError(t, serve.CheckBody(iotest.OneByteReader(serve.Pattern(min(n, 5000))), min(n, 5000)))
	}
	const n = 5*serve.BodyChunk + 100
	good, _ := io.ReadAll(serve.Pattern(n))
	damage := func(f func(b []byte) []byte) []byte { return f(append([]byte(nil), good...)) }
	for name, tc := range map[string]struct {
		body []byte
		want error
		msg  string
	}{
		"flipped byte":  {damage(func(b []byte) []byte { b[3*serve.BodyChunk+77] ^= 1; return b }), serve.ErrBodyMismatch, "byte 12365 "},
		"flipped stamp": {damage(func(b []byte) []byte { b[2*serve.BodyChunk+7] ^= 1; return b }), serve.ErrBodyMismatch, "byte 8199 "},
		"chunks swapped": {damage(func(b []byte) []byte {
			return append(append(append(b[:serve.BodyChunk:serve.BodyChunk], good[2*serve.BodyChunk:3*serve.BodyChunk]...), good[serve.BodyChunk:2*serve.BodyChunk]...), good[3*serve.BodyChunk:]...)
		}), serve.ErrBodyMismatch, "(chunk stamped 8192)"},
		"segment doubled": {damage(func(b []byte) []byte { return append(b[:1448:1448], good[:n-1448]...) }), serve.ErrBodyMismatch, "byte 1448 "},
		"short":           {good[:n-1], io.ErrUnexpectedEOF, "after 20579 of 20580 bytes"},
		"long":            {append(damage(func(b []byte) []byte { return b }), 0), serve.ErrBodyMismatch, "more than the 20580 bytes"},
	} {
		err := serve.CheckBody(bytes.NewReader(tc.body), n)
		require.ErrorIs(t, err, tc.want, name)
		require.ErrorContains(t, err, tc.msg, name)
	}
	broken := errors.New("connection reset")
	err := serve.CheckBody(io.MultiReader(serve.Pattern(1000), iotest.ErrReader(broken)), 2000)
	require.ErrorIs(t, err, broken)
	require.ErrorContains(t, err, "after 1000 of 2000 bytes")
}

// failWriter takes ok bytes, then fails.
type failWriter struct{ ok int }

func (w *failWriter) Write(b []byte) (int, error) {
	n := min(len(b), w.ok)
	w.ok -= n
	if n < len(b) {
		return n, io.ErrClosedPipe
	}
	return n, nil
}

// TestPatternWriteToError: WriteTo stops at the writer's error and counts
// what was written.
func TestPatternWriteToError(t *testing.T) {
	n, err := io.Copy(&failWriter{ok: 300000}, serve.Pattern(1<<20))
	require.ErrorIs(t, err, io.ErrClosedPipe)
	require.Equal(t, int64(300000), n)
}

// BenchmarkPattern: what producing (WriteTo, the HTTP handler's path;
// Read) and checking the body costs per byte.
func BenchmarkPattern(b *testing.B) {
	const n = 64 << 20
	for _, bc := range []struct {
		name string
		run  func() error
	}{
		{"WriteTo", func() error { _, err := io.Copy(io.Discard, serve.Pattern(n)); return err }},
		{"Read", func() error {
			_, err := io.CopyBuffer(io.Discard, readOnly{serve.Pattern(n)}, make([]byte, 32<<10))
			return err
		}},
		{"CheckBody", func() error { return serve.CheckBody(serve.Pattern(n), n) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(n)
			for b.Loop() {
				if err := bc.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
