package afpacket

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestOptionsNormalize(t *testing.T) {
	d := DefaultOptions()
	for _, tc := range []struct {
		name string
		in   *Options
		want Options
		err  string
	}{
		{"nil means defaults", nil, d, ""},
		{"zero means defaults", &Options{}, d, ""},
		{"booleans kept", &Options{NoOffload: true, QdiscBypass: true}, func() Options { o := d; o.NoOffload, o.QdiscBypass = true, true; return o }(), ""},
		{"ring", &Options{RX: RXRing}, func() Options { o := d; o.RX = RXRing; return o }(), ""},
		{"no GRO", &Options{NoGRO: true}, func() Options { o := d; o.NoGRO = true; return o }(), ""},
		{"slot ring", &Options{RX: RXSlotRing}, func() Options { o := d; o.RX = RXSlotRing; return o }(), ""},
		{"unknown RX mode", &Options{RX: RXSlotRing + 1}, Options{}, "RXMode(4): not a receive mode"},
		{"per-packet TX", &Options{TXBatch: 1}, func() Options { o := d; o.TXBatch = 1; return o }(), ""},
		{"largest", &Options{Queues: MaxQueues, RXBatch: MaxBatch, TXBatch: MaxBatch}, func() Options {
			o := d
			o.Queues, o.RXBatch, o.TXBatch = MaxQueues, MaxBatch, MaxBatch
			return o
		}(), ""},
		{"negative queues", &Options{Queues: -1}, Options{}, "-1 queues: must be from 1 to 256"},
		{"too many queues", &Options{Queues: MaxQueues + 1}, Options{}, "257 queues"},
		{"negative RX batch", &Options{RXBatch: -3}, Options{}, "RX batch -3"},
		{"TX batch over UIO_MAXIOV", &Options{TXBatch: MaxBatch + 1}, Options{}, "TX batch 1025: must be from 1 to 1024"},
		{"negative send buffer", &Options{SndBuf: -1}, Options{}, "send buffer -1 bytes"},
		{"tiny receive buffer", &Options{RcvBuf: 1000}, Options{}, "receive buffer 1000 bytes: must be at least 131072"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.in.normalize()
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.True(t, strings.HasPrefix(err.Error(), "afpacket: "), "errors name the package: %v", err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestRXModeString(t *testing.T) {
	require.Equal(t, "slotring", DefaultOptions().RX.String())
	require.Equal(t, "recvmmsg", RXRecvmmsg.String())
	require.Equal(t, "default", RXDefault.String())
	require.Equal(t, "ring", RXRing.String())
}

func TestCheckIfName(t *testing.T) {
	require.NoError(t, checkIfName("veth0"))
	require.NoError(t, checkIfName("fifteen-chars-x"))
	require.ErrorContains(t, checkIfName(""), "no interface name")
	require.ErrorContains(t, checkIfName("sixteen-chars-xx"), "longer than 15 bytes")
}

func TestNewRejectsBadOptionsFirst(t *testing.T) {
	// Option errors come before any system call, so they need no
	// privilege and no interface.
	_, err := New("nosuch0", &Options{Queues: -1})
	require.ErrorContains(t, err, "queues")
	_, err = New("", nil)
	require.ErrorContains(t, err, "no interface name")
}
