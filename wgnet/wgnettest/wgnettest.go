// Package wgnettest joins two tun.Devices with two wireguard-go devices in
// one process, peers of each other over in-memory binds
// (golang.zx2c4.com/wireguard/conn/bindtest): a whole WireGuard tunnel
// with no socket, no root and no address outside the process. wgnet's
// tests and benchmarks and `ustack bench -link wg` build their tunnels
// with it, whichever netstack is behind each TUN.
package wgnettest

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"

	"golang.zx2c4.com/wireguard/conn/bindtest"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
)

// Pair runs a wireguard-go device over each of a and b, brings both up
// and returns them. Each is the other's only peer, with fresh X25519 keys;
// a's peer is allowed addrB (as a host address) and b's addrA, the
// addresses of the networks behind the TUNs. Packets between the devices
// travel over bindtest's channels.
//
// logger receives the devices' logs; nil discards them.
//
// Pair takes ownership of a and b: closing a device closes its TUN, and
// on error Pair closes whatever it was given and built. The caller owns
// the returned devices and closes both (Device.Close); a closed device's
// goroutines have stopped.
func Pair(a, b tun.Device, addrA, addrB netip.Addr, logger *device.Logger) (devA, devB *device.Device, err error) {
	if logger == nil {
		logger = &device.Logger{Verbosef: device.DiscardLogf, Errorf: device.DiscardLogf}
	}
	tuns := [2]tun.Device{a, b}
	var devs [2]*device.Device
	fail := func(err error) (*device.Device, *device.Device, error) {
		for i, d := range devs {
			if d != nil {
				d.Close()
			} else {
				tuns[i].Close()
			}
		}
		return nil, nil, err
	}
	if !addrA.IsValid() || !addrB.IsValid() {
		return fail(errors.New("wgnettest: both addresses must be valid: give the address of the network behind each TUN"))
	}
	var priv, pub [2]string
	for i := range priv {
		k, err := ecdh.X25519().GenerateKey(rand.Reader)
		if err != nil {
			return fail(fmt.Errorf("wgnettest: generate a key: %w", err))
		}
		priv[i], pub[i] = hex.EncodeToString(k.Bytes()), hex.EncodeToString(k.PublicKey().Bytes())
	}
	binds := bindtest.NewChannelBinds()
	peer := [2]netip.Addr{addrB.Unmap(), addrA.Unmap()}
	for i := range devs {
		devs[i] = device.NewDevice(tuns[i], binds[i], logger)
		// bindtest's bind i sends only to its target, the endpoint
		// 127.0.0.1:<i+1>, which reaches the other bind.
		cfg := fmt.Sprintf("private_key=%s\nlisten_port=0\npublic_key=%s\nendpoint=127.0.0.1:%d\nallowed_ip=%s\n",
			priv[i], pub[1-i], i+1, netip.PrefixFrom(peer[i], peer[i].BitLen()))
		if err := devs[i].IpcSet(cfg); err != nil {
			return fail(fmt.Errorf("wgnettest: configure device %d: %w", i, err))
		}
	}
	for i, d := range devs {
		if err := d.Up(); err != nil {
			return fail(fmt.Errorf("wgnettest: bring device %d up: %w", i, err))
		}
	}
	return devs[0], devs[1], nil
}
