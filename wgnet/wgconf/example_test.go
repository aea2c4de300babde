package wgconf_test

import (
	"fmt"
	"net/netip"

	"github.com/ustack-dev/ustack/wgnet/wgconf"
)

// A wg-quick file parsed, printed with its keys redacted, and turned
// into what wireguard-go's device.IpcSet takes, with a resolver for the
// peer's host name.
func Example() {
	cfg, err := wgconf.Parse([]byte(`
[Interface]
PrivateKey = EBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8=
Address = 198.18.0.2/24
DNS = 198.18.0.1
PostUp = echo this line would be refused

[Peer]
PublicKey = kJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq8=
AllowedIPs = 0.0.0.0/0
Endpoint = vpn.example.test:51820
`))
	fmt.Println(err)

	cfg, err = wgconf.Parse([]byte(`
[Interface]
PrivateKey = EBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8=
Address = 198.18.0.2/24
DNS = 198.18.0.1

[Peer]
PublicKey = kJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq8=
AllowedIPs = 0.0.0.0/0
Endpoint = vpn.example.test:51820
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(cfg) // keys redacted
	fmt.Println()
	uapi, err := cfg.UAPI(func(host string) (netip.Addr, error) {
		return netip.MustParseAddr("198.18.0.1"), nil // a real caller looks host up
	})
	fmt.Print(uapi, err)
	// Output:
	// wgconf: line 6: PostUp: refused: wg-quick runs it as a shell command, and ustack runs no command (start what it would have started beside ustack)
	// [Interface]
	// PrivateKey = (redacted)
	// Address = 198.18.0.2/24
	// DNS = 198.18.0.1
	//
	// [Peer]
	// PublicKey = kJGSk5SVlpeYmZqbnJ2en6ChoqOkpaanqKmqq6ytrq8=
	// AllowedIPs = 0.0.0.0/0
	// Endpoint = vpn.example.test:51820
	//
	// private_key=101112131415161718191a1b1c1d1e1f202122232425262728292a2b2c2d2e2f
	// replace_peers=true
	// public_key=909192939495969798999a9b9c9d9e9fa0a1a2a3a4a5a6a7a8a9aaabacadaeaf
	// endpoint=198.18.0.1:51820
	// replace_allowed_ips=true
	// allowed_ip=0.0.0.0/0
	// <nil>
}
