//go:build linux

package tun_test

import (
	"errors"
	"log"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/ustack-dev/ustack/link/tun"
	"github.com/ustack-dev/ustack/stack"
)

// receiveFD reads one message from a privileged helper over the unix
// socket c and returns the descriptor it carries (SCM_RIGHTS). The
// descriptor is the caller's.
func receiveFD(c *net.UnixConn) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4)) // room for one int32 descriptor
	_, oobn, _, _, err := c.ReadMsgUnix(make([]byte, 1), oob)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, err
	}
	if len(msgs) != 1 {
		return -1, errors.New("the helper sent no descriptor")
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil {
		return -1, err
	}
	if len(fds) != 1 {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return -1, errors.New("the helper sent more than one descriptor")
	}
	return fds[0], nil
}

// An unprivileged process runs ustack over a TUN device that a privileged
// helper created, configured (addresses, MTU 1400, link up) and passed
// over a unix socket: the process needs no capability, and no netlink.
// The same OpenFD call adopts the descriptor Android's
// VpnService.establish returns (ParcelFileDescriptor.detachFd).
//
// The example is compiled, not run: it needs the helper.
func ExampleOpenFD() {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: "/run/ustack-vpn-helper.sock", Net: "unix"})
	if err != nil {
		log.Fatal(err)
	}
	fd, err := receiveFD(c)
	c.Close()
	if err != nil {
		log.Fatal(err)
	}
	// The MTU is the one the helper set: OpenFD cannot ask the device.
	ep, err := tun.OpenFD(fd, &tun.Options{MTU: 1400})
	if err != nil {
		unix.Close(fd) // on error fd is still ours
		log.Fatal(err)
	}
	log.Printf("adopted %s, offloads %v", ep.Name(), ep.Offloads())

	s, err := stack.New(nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	defer s.Close() // closes ep, and with it fd
	nic, err := s.AddNIC(ep, nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	if err := s.AddAddress(nic, netip.MustParsePrefix("198.18.22.2/24")); err != nil {
		log.Fatal(err)
	}
	// s now dials and listens through the helper's device.
}

// A network helper attaches to the TAP device a rootless container tool
// created and configured in the container's namespace (RootlessKit's
// tap0), by name, touching nothing of its configuration, and gives the
// stack the endpoint with its Ethernet framing: the stack then resolves
// the kernel's side with ARP and neighbour discovery.
//
// The example is compiled, not run: it needs the device, and to run in
// the namespace it lives in.
func ExampleOpen_tap() {
	ep, err := tun.Open("tap0", &tun.Options{TAP: true, NoConfigure: true})
	if err != nil {
		log.Fatal(err) // "tap0 is a TUN device, not TAP: ..." if it is not one
	}
	s, err := stack.New(nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	defer s.Close() // closes ep; a persistent tap0 stays
	nic, err := s.AddNIC(ep.Ethernet(), nil)
	if err != nil {
		ep.Close()
		log.Fatal(err)
	}
	// The gateway's address on the device's network (the container's
	// side is the kernel's, on tap0).
	if err := s.AddAddress(nic, netip.MustParsePrefix("198.18.0.1/24")); err != nil {
		log.Fatal(err)
	}
	log.Printf("on %s (MTU %d, offloads %v), MAC %v", ep.Name(), ep.Ethernet().MTU(), ep.Offloads(), ep.Ethernet().LinkAddress())
}
