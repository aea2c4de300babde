package main

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// inotifyEvent is one event as the kernel writes it: wd, mask, cookie,
// the name's padded length, the name NUL-padded to it.
func inotifyEvent(mask uint32, name string) []byte {
	n := 0
	if name != "" {
		n = (len(name) + 1 + 15) &^ 15
	}
	b := make([]byte, unix.SizeofInotifyEvent+n)
	binary.NativeEndian.PutUint32(b[0:], 1)
	binary.NativeEndian.PutUint32(b[4:], mask)
	binary.NativeEndian.PutUint32(b[12:], uint32(n))
	copy(b[unix.SizeofInotifyEvent:], name)
	return b
}

func TestInotifyGone(t *testing.T) {
	cat := func(bs ...[]byte) (out []byte) {
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		b    []byte
		gone bool
	}{
		{"the namespace deleted", inotifyEvent(unix.IN_DELETE, "netns-1"), true},
		{"another file deleted", inotifyEvent(unix.IN_DELETE, "netns-2"), false},
		{"a prefix of the name", inotifyEvent(unix.IN_DELETE, "netns"), false},
		{"moved away", inotifyEvent(unix.IN_MOVED_FROM, "netns-1"), true},
		{"the directory deleted", inotifyEvent(unix.IN_DELETE_SELF, ""), true},
		{"the watch gone", inotifyEvent(unix.IN_IGNORED, ""), true},
		{"after others", cat(inotifyEvent(unix.IN_DELETE, "a"), inotifyEvent(unix.IN_MOVED_FROM, "b"), inotifyEvent(unix.IN_DELETE, "netns-1")), true},
		{"cut short", inotifyEvent(unix.IN_DELETE, "netns-1")[:unix.SizeofInotifyEvent+3], false},
		{"nothing", nil, false},
	} {
		require.Equal(t, tc.gone, inotifyGone(tc.b, "netns-1"), tc.name)
	}
}

// FuzzInotifyGone: no buffer panics the parser, and a buffer made of
// whole events says gone exactly when one of them does.
func FuzzInotifyGone(f *testing.F) {
	f.Add(inotifyEvent(unix.IN_DELETE, "netns-1"), uint32(0), "x")
	f.Add(inotifyEvent(unix.IN_CREATE, "netns-2"), uint32(unix.IN_DELETE), "netns-1")
	f.Add([]byte{1, 2, 3}, uint32(unix.IN_MOVED_FROM), "")
	f.Fuzz(func(t *testing.T, raw []byte, mask uint32, name string) {
		inotifyGone(raw, "netns-1")
		if len(name) > 255 {
			return
		}
		whole := append(inotifyEvent(unix.IN_CREATE, "other"), inotifyEvent(mask, name)...)
		want := mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_IGNORED) != 0 ||
			mask&(unix.IN_DELETE|unix.IN_MOVED_FROM) != 0 && trimNUL(name) == "netns-1"
		require.Equal(t, want, inotifyGone(whole, "netns-1"))
	})
}

// trimNUL is name as the kernel's padding leaves it readable: up to its
// first NUL.
func trimNUL(name string) string {
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return name[:i]
		}
	}
	return name
}
