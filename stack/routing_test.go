package stack_test

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"

	"github.com/ustack-dev/ustack/link/pktio"
	"github.com/ustack-dev/ustack/stack"
)

// routedSegment builds a TCP/IPv4 segment from 198.18.0.2:40000 to
// 198.19.0.2:80 with valid checksums and DF set, as a Linux host sends it.
func routedSegment(seq, ack uint32, payload int) []byte {
	b := make([]byte, header.IPv4MinimumSize+header.TCPMinimumSize+payload)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{
		TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber), Flags: header.IPv4FlagDontFragment,
		SrcAddr: tcpip.AddrFrom4([4]byte{198, 18, 0, 2}), DstAddr: tcpip.AddrFrom4([4]byte{198, 19, 0, 2}),
	})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(ip.Payload())
	tcp.Encode(&header.TCPFields{SrcPort: 40000, DstPort: 80, SeqNum: seq, AckNum: ack, DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck, WindowSize: 60000})
	for i := range payload {
		tcp.Payload()[i] = byte(seq) + byte(i)
	}
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(tcp)))
	tcp.SetChecksum(^tcp.CalculateChecksum(checksum.Checksum(tcp.Payload(), xsum)))
	return b
}

// TestRoutingLeavesPacketsAlone: a routing stack routes a round of
// one flow's segments out as they came, one packet each, in order, even
// where a host would merge them: back-to-back data segments (GRO would
// make one segment larger than the MTU, which routing cannot send), a run
// of growing pure ACKs (ACK thinning would keep the last), and a pure
// ACK its sender's next request answers at once (the delayed ACK would
// hold it, and drop it once the request carried it).
func TestRoutingLeavesPacketsAlone(t *testing.T) {
	tcp := stack.DefaultTCPOptions()
	tcp.DelayedACK = time.Hour // a held ACK would never leave
	s, err := stack.New(&stack.Options{Routing: true, TCP: &tcp})
	require.NoError(t, err)
	defer s.Close()
	in, err := pktio.New(nil)
	require.NoError(t, err)
	out, err := pktio.New(nil)
	require.NoError(t, err)
	inID, err := s.AddNIC(in, nil)
	require.NoError(t, err)
	outID, err := s.AddNIC(out, nil)
	require.NoError(t, err)
	require.NoError(t, s.AddAddress(inID, netip.MustParsePrefix("198.18.0.1/24")))
	require.NoError(t, s.AddAddress(outID, netip.MustParsePrefix("198.19.0.1/24")))

	var round [][]byte
	for i := range 4 { // data
		round = append(round, routedSegment(uint32(1000+1000*i), 1, 1000))
	}
	for i := range 3 { // growing pure ACKs
		round = append(round, routedSegment(5000, uint32(100*(i+1)), 0))
	}
	// Request/response, twice: a pure ACK, then the next request with the
	// same acknowledgement.
	round = append(round, routedSegment(5000, 400, 0), routedSegment(5000, 400, 20), routedSegment(5020, 500, 0), routedSegment(5020, 500, 20))
	for _, rr := range [][][]byte{round[:7], round[7:9], round[9:]} {
		_, err = in.Write(rr, 0)
		require.NoError(t, err)
	}

	got := make(chan []string, 1)
	go func() {
		var seen []string
		bufs, sizes := [][]byte{make([]byte, 1<<16)}, []int{0}
		for len(seen) < len(round) {
			if _, err := out.Read(bufs, sizes, 0); errors.Is(err, pktio.ErrClosed) {
				break
			}
			seen = append(seen, describe(bufs[0][:sizes[0]]))
		}
		got <- seen
	}()
	var seen []string
	select {
	case seen = <-got:
	case <-time.After(10 * time.Second):
		out.Close() // ends the reader
		seen = <-got
	}
	var want []string
	for _, b := range round {
		want = append(want, describe(b))
	}
	require.Equal(t, want, seen, "routed out, in order")
	require.Zero(t, in.LinkStats().TXPackets, "nothing went back to the sender (an ICMP error would)")
}

// describe names a TCP/IPv4 packet by its length, sequence and
// acknowledgement numbers.
func describe(b []byte) string {
	ip := header.IPv4(b)
	tcp := header.TCP(ip.Payload())
	return fmt.Sprintf("len %d seq %d ack %d", ip.TotalLength(), tcp.SequenceNumber(), tcp.AckNumber())
}
