package leakcheck

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

func TestMain(m *testing.M) { Main(m) }

// recorder is a testing.TB that keeps what Settled reports instead of
// failing the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatal(args ...any) { r.failed = fmt.Sprint(args...) }

func (r *recorder) Fatalf(format string, args ...any) { r.failed = fmt.Sprintf(format, args...) }

// TestSettledNamesWhatIsAlive: with a packet buffer alive, Settled fails
// and counts it by type, once; once it is released, Settled passes (and
// so does Main's check at the end).
func TestSettledNamesWhatIsAlive(t *testing.T) {
	Settled(t)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData([]byte("held"))})
	r := &recorder{TB: t}
	Settled(r)
	require.Contains(t, r.failed, "outlived the test: 2 alive (")
	require.Contains(t, r.failed, "1 stack.PacketBuffer")
	require.Contains(t, r.failed, "reference count of 1 instead of 0")
	// Reported once: a later check does not blame the next test for it.
	r = &recorder{TB: t}
	Settled(r)
	require.Empty(t, r.failed)
	pkt.DecRef()
	Settled(t)
	reportedMu.Lock()
	require.Empty(t, reported, "freed objects are forgotten")
	reportedMu.Unlock()
}

func TestLeaksString(t *testing.T) {
	report := "Leak checking detected 25 leaked objects:\n"
	for range 25 {
		report += "[buffer.chunk 0x1] reference count of 1 instead of 0\n"
	}
	l := leaks{total: 27, byType: map[string]int{"buffer.chunk": 25, "stack.PacketBuffer": 2}, report: report}
	s := l.String()
	require.Contains(t, s, "27 alive (25 buffer.chunk, 2 stack.PacketBuffer)\n")
	require.Contains(t, s, "... and 7 more lines")
}
