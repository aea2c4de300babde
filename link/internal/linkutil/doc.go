// Package linkutil is the bookkeeping that ustack's link endpoints share
// and no user needs: attach and close (Lifecycle), the busy-polling gate
// of a receive queue (PollGate), the writability watcher of a transmit
// queue (Watcher) and the error a device endpoint reports once its device
// is gone (DeviceGone).
package linkutil
