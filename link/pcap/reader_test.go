package pcap_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// capture is a pcap file as the tests read it back.
type capture struct {
	nanos             bool // timestamps in nanoseconds (magic 0xa1b23c4d)
	major, minor      uint16
	snapLen, linkType uint32
	records           []record
}

// record is one packet of a capture.
type record struct {
	at   time.Time
	orig int    // the packet's length
	data []byte // what was captured of it
}

// readCapture parses a whole pcap file, in either byte order and either
// timestamp resolution, failing t on anything malformed: a small reader of
// what tcpdump and Wireshark read, independent of the package's writer.
func readCapture(t *testing.T, b []byte) capture {
	t.Helper()
	require.GreaterOrEqual(t, len(b), 24, "a file header")
	var order binary.ByteOrder
	var c capture
	for _, o := range []binary.ByteOrder{binary.LittleEndian, binary.BigEndian} {
		switch o.Uint32(b) {
		case 0xa1b2c3d4:
			order = o
		case 0xa1b23c4d:
			order, c.nanos = o, true
		}
		if order != nil {
			break
		}
	}
	require.NotNil(t, order, "magic %x is not pcap's", b[:4])
	c.major, c.minor = order.Uint16(b[4:]), order.Uint16(b[6:])
	c.snapLen, c.linkType = order.Uint32(b[16:]), order.Uint32(b[20:])
	for b = b[24:]; len(b) > 0; {
		require.GreaterOrEqual(t, len(b), 16, "record %d: a whole record header", len(c.records))
		sec, frac := int64(order.Uint32(b)), int64(order.Uint32(b[4:]))
		incl, orig := int(order.Uint32(b[8:])), int(order.Uint32(b[12:]))
		require.LessOrEqual(t, incl, orig, "record %d: captured no more than the packet", len(c.records))
		require.LessOrEqual(t, incl, int(c.snapLen), "record %d: captured no more than the snap length", len(c.records))
		require.GreaterOrEqual(t, len(b), 16+incl, "record %d: all %d captured bytes", len(c.records), incl)
		if !c.nanos {
			frac *= 1000
		}
		require.Less(t, frac, int64(time.Second), "record %d: a fraction of a second", len(c.records))
		c.records = append(c.records, record{at: time.Unix(sec, frac), orig: orig, data: b[16 : 16+incl]})
		b = b[16+incl:]
	}
	return c
}
