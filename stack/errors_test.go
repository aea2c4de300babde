package stack_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/ethernet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	gstack "gvisor.dev/gvisor/pkg/tcpip/stack"

	"github.com/ustack-dev/ustack/stack"
	"github.com/ustack-dev/ustack/stack/stacktest"
)

// translations is what TranslateError must give for each of gVisor's
// errors: the errno gVisor's own system call layer gives Linux programs
// for it (pkg/syserr, netstack.go), written here rather than computed.
// ErrInvalidNICID, which pkg/syserr does not map (it arises only when a
// NIC is made with ID 0), is EINVAL; ErrClosedForReceive, which has no
// errno there (a read returns 0), is io.EOF; ErrNoNet is ENONET where
// the system has one (wantNoNet).
var translations = []struct {
	err  tcpip.Error
	want error
}{
	{&tcpip.ErrAborted{}, syscall.EPIPE},
	{&tcpip.ErrAddressFamilyNotSupported{}, syscall.EAFNOSUPPORT},
	{&tcpip.ErrAlreadyBound{}, syscall.EINVAL},
	{&tcpip.ErrAlreadyConnected{}, syscall.EISCONN},
	{&tcpip.ErrAlreadyConnecting{}, syscall.EALREADY},
	{&tcpip.ErrBadAddress{}, syscall.EFAULT},
	{&tcpip.ErrBadBuffer{}, syscall.EFAULT},
	{&tcpip.ErrBadLocalAddress{}, syscall.EADDRNOTAVAIL},
	{&tcpip.ErrBroadcastDisabled{}, syscall.EACCES},
	{&tcpip.ErrClosedForReceive{}, io.EOF},
	{&tcpip.ErrClosedForSend{}, syscall.EPIPE},
	{&tcpip.ErrConnectStarted{}, syscall.EINPROGRESS},
	{&tcpip.ErrConnectionAborted{}, syscall.ECONNABORTED},
	{&tcpip.ErrConnectionRefused{}, syscall.ECONNREFUSED},
	{&tcpip.ErrConnectionReset{}, syscall.ECONNRESET},
	{&tcpip.ErrDestinationRequired{}, syscall.EDESTADDRREQ},
	{&tcpip.ErrDuplicateAddress{}, syscall.EEXIST},
	{&tcpip.ErrDuplicateNICID{}, syscall.EEXIST},
	{&tcpip.ErrInvalidNICID{}, syscall.EINVAL},
	{&tcpip.ErrInvalidEndpointState{}, syscall.EINVAL},
	{&tcpip.ErrInvalidOptionValue{}, syscall.EINVAL},
	{&tcpip.ErrInvalidPortRange{}, syscall.EINVAL},
	{&tcpip.ErrMalformedHeader{}, syscall.EINVAL},
	{&tcpip.ErrMessageTooLong{}, syscall.EMSGSIZE},
	{&tcpip.ErrNetworkUnreachable{}, syscall.ENETUNREACH},
	{&tcpip.ErrNoBufferSpace{}, syscall.ENOBUFS},
	{&tcpip.ErrNoPortAvailable{}, syscall.EAGAIN},
	{&tcpip.ErrHostUnreachable{}, syscall.EHOSTUNREACH},
	{&tcpip.ErrHostDown{}, syscall.EHOSTDOWN},
	{&tcpip.ErrNoNet{}, wantNoNet},
	{&tcpip.ErrNoSuchFile{}, syscall.ENOENT},
	{&tcpip.ErrNotConnected{}, syscall.ENOTCONN},
	{&tcpip.ErrNotPermitted{}, syscall.EPERM},
	{&tcpip.ErrNotSupported{}, syscall.EOPNOTSUPP},
	{&tcpip.ErrPortInUse{}, syscall.EADDRINUSE},
	{&tcpip.ErrQueueSizeNotSupported{}, syscall.ENOTTY},
	{&tcpip.ErrTimeout{}, syscall.ETIMEDOUT},
	{&tcpip.ErrUnknownDevice{}, syscall.ENODEV},
	{&tcpip.ErrUnknownNICID{}, syscall.ENODEV},
	{&tcpip.ErrUnknownProtocol{}, syscall.EINVAL},
	{&tcpip.ErrUnknownProtocolOption{}, syscall.ENOPROTOOPT},
	{&tcpip.ErrWouldBlock{}, syscall.EAGAIN},
	{&tcpip.ErrMissingRequiredFields{}, syscall.EINVAL},
	{&tcpip.ErrMulticastInputCannotBeOutput{}, syscall.EINVAL},
	{&tcpip.ErrEndpointBusy{}, syscall.EBUSY},
}

func TestTranslateError(t *testing.T) {
	for _, tc := range translations {
		t.Run(fmt.Sprintf("%T", tc.err), func(t *testing.T) {
			got := stack.TranslateError(tc.err)
			require.ErrorIs(t, got, tc.want)
			require.Equal(t, tc.want, got, "the error itself, not one that wraps it")
		})
	}
}

// TestTranslateErrorCoversGVisor reads the gVisor module's own list of
// errors (pkg/tcpip/errors.go, in the module cache) and checks that
// translations has each: a gVisor upgrade that adds an error fails here,
// naming it.
func TestTranslateErrorCoversGVisor(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "gvisor.dev/gvisor").Output()
	require.NoError(t, err, "find the gVisor module (go list -m)")
	src, err := os.ReadFile(filepath.Join(strings.TrimSpace(string(out)), "pkg", "tcpip", "errors.go"))
	require.NoError(t, err)
	have := map[string]bool{}
	for _, tc := range translations {
		have[strings.TrimPrefix(fmt.Sprintf("%T", tc.err), "*tcpip.")] = true
	}
	types := regexp.MustCompile(`(?m)^type (Err\w+) struct`).FindAllStringSubmatch(string(src), -1)
	require.NotEmpty(t, types)
	for _, m := range types {
		require.True(t, have[m[1]], "gVisor's %s has no entry in translations: add it with its Linux errno (gVisor's pkg/syserr/netstack.go)", m[1])
	}
	require.Len(t, translations, len(types), "an entry in translations that gVisor no longer has")
}

// TestDialErrorsMatchErrno dials through DialContext where the peer
// refuses (a reset answers the SYN), where no route leads, and where the
// on-link neighbour never answers ARP (the hosts' link is Ethernet here,
// so that A resolves neighbours): each error is the errno a Linux socket
// gives, through errors.Is.
func TestDialErrorsMatchErrno(t *testing.T) {
	for _, tc := range []struct {
		name, address string
		ethernet      bool
		want          syscall.Errno
	}{
		{"refused", "198.18.0.2:9", false, syscall.ECONNREFUSED},
		{"refused over IPv6", "[fd00::2]:9", false, syscall.ECONNREFUSED},
		{"no route to the network", "203.0.113.1:80", false, syscall.ENETUNREACH},
		{"neighbour unreachable", "198.18.0.99:80", true, syscall.EHOSTUNREACH},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts stacktest.Options
			if tc.ethernet {
				opts.WrapLink = func(_ string, ep gstack.LinkEndpoint) (gstack.LinkEndpoint, error) {
					return ethernet.New(ep), nil
				}
			}
			p := stacktest.New(t, &opts)
			if tc.ethernet {
				// Resolution gives up after a few probes: make them
				// 10 ms apart rather than gVisor's second.
				nud := gstack.DefaultNUDConfigurations()
				nud.RetransmitTimer = 10 * time.Millisecond
				require.Nil(t, p.A.GVisor().SetNUDConfigurations(p.A.Stats().NICs[0].ID, ipv4.ProtocolNumber, nud))
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			_, err := p.A.DialContext(ctx, "tcp", tc.address)
			var op *net.OpError
			require.ErrorAs(t, err, &op)
			require.Equal(t, "dial", op.Op)
			require.Equal(t, tc.address, op.Addr.String())
			require.ErrorIs(t, err, tc.want)
		})
	}
}
