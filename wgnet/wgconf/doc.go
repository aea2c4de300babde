// Package wgconf reads WireGuard configuration files in wg-quick's
// format, for a WireGuard endpoint that runs in one process (`ustack wg
// -config FILE`): wireguard-go for the protocol, package wgnet for the
// network behind it.
//
// A file is INI: an [Interface] section with PrivateKey, ListenPort,
// FwMark (wg(8)'s keys) and Address, DNS and MTU (wg-quick's), then one
// [Peer] section per peer with PublicKey, PresharedKey, AllowedIPs,
// Endpoint and PersistentKeepalive. Section names and keys are
// case-insensitive, as wg(8) and wg-quick read them; `#` starts a
// comment. Address, DNS and AllowedIPs take comma-separated lists and
// may be repeated; every other key may be given once per section.
//
// Parse is stricter than wg-quick where being lenient would hide a
// mistake: an unknown section or key is an error, not ignored; a key
// given twice is an error, not "the last one wins"; a peer's public key
// may appear once. wg-quick's keys that run shell commands (PreUp,
// PostUp, PreDown, PostDown), install routes (Table) or write the file
// back (SaveConfig) are refused with the reason: the endpoint runs no
// command and installs no route, its network being its own. FwMark is
// accepted: it marks the packets of wireguard-go's UDP sockets, as it
// marks the kernel's.
//
// Keys are secrets. No error names a value, only the line and the key;
// a Config prints with its private and preshared keys redacted, through
// every fmt verb. Config.Marshal renders the file, secrets included, and
// Config.UAPI the configuration wireguard-go's device.IpcSet takes.
package wgconf
