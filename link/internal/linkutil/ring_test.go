package linkutil

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

func ringPacket(size int) *stack.PacketBuffer {
	return stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(make([]byte, size))})
}

// TestPacketRing: FIFO order across the wrap, room and refusal when full,
// references taken by PushRefs and handed out by Pop, Drain and PopInto.
func TestPacketRing(t *testing.T) {
	r := NewPacketRing(4)
	require.Equal(t, 1, r.WakeRoom())
	require.Nil(t, r.Pop())
	require.Nil(t, r.Peek())

	pkts := []*stack.PacketBuffer{ringPacket(1), ringPacket(2), ringPacket(3)}
	n, bytes := r.PushRefs(pkts)
	require.Equal(t, 3, n)
	require.Equal(t, 6, bytes)
	for _, p := range pkts {
		p.DecRef() // the ring holds its own references
	}
	require.Same(t, pkts[0], r.Peek())
	require.Same(t, pkts[0], r.Pop())
	pkts[0].DecRef()

	// Wrap around the end: two more fit, the third is refused.
	more := []*stack.PacketBuffer{ringPacket(4), ringPacket(5), ringPacket(6)}
	n, _ = r.PushRefs(more)
	require.Equal(t, 2, n)
	require.True(t, r.Full())
	require.Zero(t, r.Room())
	require.False(t, r.Push(more[2]), "full")
	more[2].DecRef()
	for _, p := range more[:2] {
		p.DecRef()
	}

	batch := make([]*stack.PacketBuffer, 2)
	require.Equal(t, 2, r.PopInto(batch))
	require.Equal(t, []*stack.PacketBuffer{pkts[1], pkts[2]}, batch)
	for _, p := range batch {
		p.DecRef()
	}
	rest := r.Drain(nil)
	require.Equal(t, []*stack.PacketBuffer{more[0], more[1]}, rest)
	for _, p := range rest {
		p.DecRef()
	}
	require.Zero(t, r.Len())
}
