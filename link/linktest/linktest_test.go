package linktest_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/internal/leakcheck"
	"github.com/ustack-dev/ustack/link/linktest"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

func list(payloads ...string) stack.PacketBufferList {
	var l stack.PacketBufferList
	for _, p := range payloads {
		pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData([]byte(p))})
		pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
		l.PushBack(pkt)
	}
	return l
}

func TestWriterTakesRefusesAndFails(t *testing.T) {
	w := &linktest.Writer{Keep: true, Take: func(n int) int { return n - 1 }}
	l := list("a", "b", "c")
	n, err := w.WritePackets(l)
	l.DecRef()
	require.Equal(t, 2, n)
	require.IsType(t, &tcpip.ErrNoBufferSpace{}, err)
	require.Equal(t, [][]byte{[]byte("a"), []byte("b")}, w.Written())
	require.Equal(t, 1, w.Calls())
	require.Equal(t, 2, w.Taken())
	require.Equal(t, 1, w.Refused())

	f := &linktest.Writer{Fail: &tcpip.ErrClosedForSend{}}
	l = list("a")
	n, err = f.WritePackets(l)
	l.DecRef()
	require.Zero(t, n)
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)
	require.Equal(t, 1, f.Refused())
	require.Empty(t, f.Problems())
}

func TestNotifyingWriterSignalsAfterARefusal(t *testing.T) {
	w := linktest.NotifyingWriter{Writer: &linktest.Writer{Take: func(int) int { return 0 }}}
	signalled := make(chan struct{})
	w.NotifyWritable(func() { close(signalled) })
	l := list("a")
	n, _ := w.WritePackets(l)
	l.DecRef()
	require.Zero(t, n)
	<-signalled
}

func TestEndpointInjectAndClose(t *testing.T) {
	e := linktest.NewEndpoint(nil)
	require.False(t, e.Inject([]byte{0x45}), "not attached")
	s := &linktest.Sink{Hold: true}
	e.Attach(s)
	require.True(t, e.Inject([]byte{0x45, 1}))
	got := s.Wait(t, 1)
	require.Equal(t, []byte{0x45, 1}, got[0].Data)
	require.Equal(t, header.IPv4ProtocolNumber, got[0].Proto)
	held := s.Held()
	require.Len(t, held, 1)
	require.Equal(t, []byte{0x45, 1}, held[0].Data().AsRange().ToSlice())
	require.Equal(t, 1, s.Release())
	require.Empty(t, s.Held())

	closes := 0
	e.SetOnCloseAction(func() { closes++ })
	e.Close()
	e.Close()
	require.Equal(t, 1, closes)
	require.False(t, e.IsAttached())
	l := list("a")
	_, err := e.WritePackets(l)
	l.DecRef()
	require.IsType(t, &tcpip.ErrClosedForSend{}, err)
}

func TestFeaturedCountsCalls(t *testing.T) {
	f := linktest.NewFeatured(nil)
	f.PollRound = 2
	require.Equal(t, 2, f.BusyPoll())
	require.False(t, f.Writable(), "no callback yet")
	called := false
	f.NotifyWritable(func() { called = true })
	require.True(t, f.Writable())
	require.True(t, called)
	require.Equal(t, 1, f.Calls("BusyPoll"))
	require.Equal(t, 1, f.Calls("NotifyWritable"))
	require.Zero(t, f.Calls("LinkStats"))
}
