// Package linkutil is the bookkeeping that ustack's link endpoints share
// and no user needs: attach and close (Lifecycle), the busy-polling gate
// of a receive queue (PollGate), the writability watcher of a transmit
// queue (Watcher), the error a device endpoint reports once its device
// is gone (DeviceGone), the bounded packet FIFO (PacketRing), the
// receive coalescing of a round (GRO), and the optional interfaces a
// wrapper endpoint passes through (Passthrough).
package linkutil
