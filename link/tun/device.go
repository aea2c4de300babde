package tun

// Device is a TUN or TAP device as Create leaves it: created or attached
// to, configured as asked, its descriptors open, and no endpoint over
// them yet. It is not safe for concurrent use.
type Device struct {
	// Name is the interface name, as the kernel has it (it picks one when
	// Create is given none).
	Name string
	// TAP: a TAP device, which carries Ethernet frames; false: a TUN
	// device, which carries IP packets.
	TAP bool
	// MTU is the device's MTU: the one Create set, or with NoConfigure
	// the one given, or the device's own.
	MTU uint32
	// FDs are the device's descriptors, one per queue: non-blocking and
	// close-on-exec, with the virtio-net header (IFF_VNET_HDR) unless
	// Options.NoOffload. They are the caller's, to pass to another
	// process (SCM_RIGHTS) for OpenFD, or to Close.
	FDs []int
	// flags are the TUNSETIFF flags the queues were opened with.
	flags uint16
}
