#!/bin/bash
# wg.sh - ustack as a WireGuard endpoint against a real peer: the
# wireguard-go program on a kernel TUN device in a network namespace,
# configured with wg and ip, its default route through the tunnel. One
# run, the configurations alternating (A B A B ...) REPS times, each cell
# the median of its runs, quoted as ratios: the machine is shared and its
# absolute numbers drift.
#
# 1. Exit node: the peer downloads SIZE MiB (iperf3 -R) from a server in
#    a namespace of its own, through
#      - `ustack wg` (confined, as it runs by default), relaying the
#        peer's flows from host sockets, or
#      - the same wireguard-go program on a kernel TUN in a namespace that
#        forwards and masquerades (nftables) to the server: a kernel exit.
#    Both at MTU 1420; the peer's wireguard-go switches between them
#    (wg set). Also counted: the packets the peer's veth receives per MiB
#    (a UDP GSO packet that crosses the veth whole counts once), and the
#    CPU time per GB of both ends' processes (/proc/PID/stat: the exit's
#    ustack processes or wireguard-go, and the peer's wireguard-go; the
#    kernel exit's forwarding and NAT run in softirq and are not counted).
# 2. Client: a WireGuard client of the same peer, the test tree's client
#    program (integration/wgbench_test.go, the test binary in its wgclient
#    mode: one wireguard-go device and UDP bind, wgnet or wireguard-go's
#    tun/netstack behind it), downloads and uploads SIZE MiB from a server
#    behind the peer and makes RR round trips of one byte; CPU per GB of
#    the client (getrusage) and of the peer's wireguard-go.
# 3. Sandbox: `ustack tun -wg` serves a namespace whose only way out is a
#    tunnel to the same peer (confined, as it runs by default); the same
#    client program inside it (-stack host: no tunnel of its own)
#    downloads SIZE MiB from the same server, against the wgnet client of
#    part 2; CPU per GB of ustack's processes and of the client in the
#    sandbox together.
#
# Needs root, go, iperf3, jq, wg (wireguard-tools), nft (nftables), ip
# (iproute2). It builds ustack, wireguard-go (from the module go.mod
# requires) and the integration test binary into a temporary directory;
# everything it creates (namespaces, processes, that directory) is
# removed on exit. No traffic leaves the namespaces it creates.
#
# Env: REPS [3], SIZE [256] MiB per transfer, RR [2000] round trips,
#      USTACK_FLAGS [""] extra `ustack wg` flags, PARTS ["exit client tunwg"]
#      which of the three to run (tunwg's ratio needs client's download),
#      KEEP=1 keeps the work directory.
set -u
export LC_ALL=C
REPS=${REPS:-3} SIZE=${SIZE:-256} RR=${RR:-2000} USTACK_FLAGS=${USTACK_FLAGS:-} PARTS=${PARTS:-"exit client tunwg"}
[ "$(id -u)" = 0 ] || { echo "wg.sh: must run as root (network namespaces, TUN devices)" >&2; exit 1; }
for t in go iperf3 jq wg nft ip; do
    command -v "$t" >/dev/null || { echo "wg.sh: missing $t (apt-get install golang iperf3 jq wireguard-tools nftables iproute2)" >&2; exit 1; }
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d -t wg.XXXXXX)
P=wgb-peer-$$ U=wgb-uexit-$$ K=wgb-kexit-$$ S=wgb-srv-$$ T=wgb-sandbox-$$
PIDS=()
cleanup() {
    local p ns
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
    for ns in $P $U $K $S $T; do ip netns del "$ns" 2>/dev/null; done
    [ -n "${KEEP:-}" ] && echo "wg.sh: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
die() { echo "wg.sh: $*" >&2; exit 1; }
nsx() { local ns=$1; shift; ip netns exec "$ns" "$@"; }

echo "wg.sh: building ustack, wireguard-go and the test binary into $WORK" >&2
(cd "$ROOT" && go build -o "$WORK/ustack" ./cmd/ustack && go build -o "$WORK/wireguard-go" golang.zx2c4.com/wireguard &&
    go test -c -o "$WORK/integration.test" ./integration) || die "build failed"
TESTBIN=$WORK/integration.test
CHILD=USTACK_TEST_SANDBOX_CHILD

# Namespaces and links: the peer P reaches the ustack exit U and the
# kernel exit K over veths; both exits reach the server S.
for ns in $P $U $K $S; do ip netns add "$ns" && nsx "$ns" ip link set lo up || die "namespace $ns"; done
veth() { # NS_A IF_A ADDR_A NS_B IF_B ADDR_B
    ip link add "$2" netns "$1" type veth peer name "$5" netns "$4" &&
        nsx "$1" ip addr add "$3" dev "$2" && nsx "$1" ip link set "$2" up &&
        nsx "$4" ip addr add "$6" dev "$5" && nsx "$4" ip link set "$5" up
}
veth $P p2u 198.18.50.2/24 $U u2p 198.18.50.1/24 || die "veth P-U"
veth $P p2k 198.18.51.2/24 $K k2p 198.18.51.1/24 || die "veth P-K"
veth $U u2s 198.18.52.1/24 $S s2u 198.18.52.2/24 || die "veth U-S"
veth $K k2s 198.18.53.1/24 $S s2k 198.18.53.2/24 || die "veth K-S"
SERVER=198.18.60.1
nsx $S ip addr add $SERVER/32 dev lo
nsx $U ip route add $SERVER/32 via 198.18.52.2
nsx $K ip route add $SERVER/32 via 198.18.53.2
nsx $K sysctl -qw net.ipv4.ip_forward=1
nsx $K nft -f - <<EOF || die "nftables"
table ip nat {
    chain post { type nat hook postrouting priority 100; oifname "k2s" masquerade; }
}
EOF

key() { wg genkey; }
pub() { echo "$1" | wg pubkey; }
PK=$(key) UK=$(key) KK=$(key) CK=$(key) TK=$(key)
PPUB=$(pub "$PK") UPUB=$(pub "$UK") KPUB=$(pub "$KK") CPUB=$(pub "$CK") TPUB=$(pub "$TK")
PORT=20061 PPORT=20062

# wireguard-go on a kernel TUN: NS IF PRIVATE PORT ADDR
wggo() {
    WG_PROCESS_FOREGROUND=1 LOG_LEVEL=error ip netns exec "$1" "$WORK/wireguard-go" -f "$2" >"$WORK/$2.log" 2>&1 &
    PIDS+=($!)
    local i
    for i in $(seq 100); do nsx "$1" wg show "$2" >/dev/null 2>&1 && break; sleep 0.1; done
    echo "$3" >"$WORK/$2.key"
    nsx "$1" wg set "$2" private-key "$WORK/$2.key" listen-port "$4" &&
        nsx "$1" ip addr add "$5" dev "$2" && nsx "$1" ip link set "$2" mtu 1420 up || die "wireguard-go $2 in $1"
}
wggo $P wgp "$PK" $PPORT 198.19.100.2/24
PEERWG=${PIDS[-1]}
nsx $P ip route add default dev wgp
nsx $P wg set wgp peer "$CPUB" allowed-ips 198.19.100.3/32
nsx $P wg set wgp peer "$TPUB" allowed-ips 198.19.100.4/32
wggo $K wgk "$KK" $PORT 198.19.100.1/24
KEXITWG=${PIDS[-1]}
nsx $K wg set wgk peer "$PPUB" allowed-ips 198.19.100.2/32

cat >"$WORK/uexit.conf" <<EOF
[Interface]
PrivateKey = $UK
ListenPort = $PORT
Address = 198.19.100.1/24

[Peer]
PublicKey = $PPUB
AllowedIPs = 198.19.100.2/32
EOF
UCMD="ustack wg -config uexit.conf $USTACK_FLAGS"
# shellcheck disable=SC2086 # USTACK_FLAGS is a list of flags
ip netns exec $U "$WORK/ustack" wg -config "$WORK/uexit.conf" $USTACK_FLAGS 2>"$WORK/ustack.log" &
PIDS+=($!)
USTACK=${PIDS[-1]}
for i in $(seq 100); do grep -q "pings" "$WORK/ustack.log" 2>/dev/null && break; sleep 0.1; done
grep -q "pings" "$WORK/ustack.log" || die "ustack wg did not start: $(cat "$WORK/ustack.log")"

# The sandbox T, served by ustack tun -wg from U (where its WireGuard
# socket lives): a client of the peer at 198.19.100.4.
cat >"$WORK/tunwg.conf" <<EOF
[Interface]
PrivateKey = $TK
Address = 198.19.100.4/32

[Peer]
PublicKey = $PPUB
Endpoint = 198.18.50.2:$PPORT
AllowedIPs = 0.0.0.0/0
EOF
chmod 600 "$WORK/tunwg.conf"
TCMD="ustack tun -wg tunwg.conf -dns-upstream off -netns /run/netns/T"
if [[ " $PARTS " == *" tunwg "* ]]; then
    ip netns add $T || die "namespace $T"
    ip netns exec $U "$WORK/ustack" tun -wg "$WORK/tunwg.conf" -dns-upstream off -netns "/run/netns/$T" 2>"$WORK/tunwg.log" &
    PIDS+=($!)
    TUNWG=${PIDS[-1]}
    for i in $(seq 100); do grep -q "serving" "$WORK/tunwg.log" 2>/dev/null && break; sleep 0.1; done
    grep -q "serving" "$WORK/tunwg.log" || die "ustack tun -wg did not start: $(cat "$WORK/tunwg.log")"
fi

ip netns exec $S iperf3 -s -B $SERVER -p 5201 >"$WORK/iperf3.log" 2>&1 &
PIDS+=($!)
env $CHILD=wgserver ip netns exec $P "$TESTBIN" 198.19.100.2:5300 >"$WORK/wgserver.log" 2>&1 &
PIDS+=($!)
for i in $(seq 100); do grep -q ready "$WORK/wgserver.log" && break; sleep 0.1; done

HZ=$(getconf CLK_TCK)
# ticks PID...: user and system CPU ticks of the processes and their
# children (ustack wg's relay).
ticks() {
    local p c sum=0
    for p in "$@"; do
        for c in $p $(pgrep -P "$p"); do
            [ -r /proc/$c/stat ] || continue
            sum=$((sum + $(sed 's/.*) //' /proc/$c/stat | awk '{print $12 + $13}')))
        done
    done
    echo $sum
}
rxpkts() { ip -n $P -s -j link show "$1" | jq '.[0].stats64.rx.packets'; }
# s/GB for TICKS over BYTES
perGB() { awk -v t="$1" -v hz="$HZ" -v b="$2" 'BEGIN { printf "%.2f", t / hz / (b / 1e9) }'; }

use_exit() { # ustack|kernel
    local on off ep
    if [ "$1" = ustack ]; then on=$UPUB off=$KPUB ep=198.18.50.1:$PORT; else on=$KPUB off=$UPUB ep=198.18.51.1:$PORT; fi
    nsx $P wg set wgp peer "$off" remove
    nsx $P wg set wgp peer "$on" endpoint "$ep" allowed-ips 0.0.0.0/0
    # The handshake, and the path, before the measurement.
    nsx $P ping -c 3 -i 0.2 -W 2 $SERVER >/dev/null 2>&1 || true
}

# exit_run ustack|kernel: prints Mbit/s, packets per MiB, exit s/GB, peer s/GB
exit_run() {
    local exitpid veth bytes=$((SIZE << 20))
    if [ "$1" = ustack ]; then exitpid=$USTACK veth=p2u; else exitpid=$KEXITWG veth=p2k; fi
    use_exit "$1"
    local rx0 e0 p0 rx1 e1 p1 bps
    rx0=$(rxpkts $veth) e0=$(ticks "$exitpid") p0=$(ticks "$PEERWG")
    bps=$(nsx $P iperf3 -c $SERVER -p 5201 -R -n "${SIZE}M" -J | jq '.end.sum_received.bits_per_second')
    rx1=$(rxpkts $veth) e1=$(ticks "$exitpid") p1=$(ticks "$PEERWG")
    [ -n "$bps" ] && [ "$bps" != null ] || die "iperf3 through the $1 exit failed"
    echo "$(awk -v b="$bps" 'BEGIN { printf "%.0f", b / 1e6 }') $(awk -v n=$((rx1 - rx0)) -v m="$SIZE" 'BEGIN { printf "%.1f", n / m }') $(perGB $((e1 - e0)) $bytes) $(perGB $((p1 - p0)) $bytes)"
}

# client_run wgnet|netstack download|upload|rr: prints the rate (Mbit/s,
# or round trips/s), client s/GB, peer s/GB
client_run() {
    local n=$((SIZE << 20)) p0 p1 out
    [ "$2" = rr ] && n=$RR
    p0=$(ticks "$PEERWG")
    out=$(env $CHILD=wgclient ip netns exec $U "$TESTBIN" -stack "$1" -key "$CK" -peer "$PPUB" -endpoint 198.18.50.2:$PPORT \
        -addr 198.19.100.3 -server 198.19.100.2:5300 -test "$2" -n $n) || die "client $1 $2 failed"
    p1=$(ticks "$PEERWG")
    if [ "$2" = rr ]; then
        echo "$out" | jq -r '"\(.round_trips / .seconds | floor) - -"'
    else
        echo "$(echo "$out" | jq -r '"\(.bytes * 8 / .seconds / 1e6 | floor) \(.cpu_seconds / (.bytes / 1e9) * 100 | floor / 100)"') $(perGB $((p1 - p0)) "$n")"
    fi
}

# tunwg_run: the client in the sandbox downloads SIZE MiB; prints
# Mbit/s, s/GB of ustack's processes and the client together, peer s/GB
tunwg_run() {
    local n=$((SIZE << 20)) t0 t1 p0 p1 out
    t0=$(ticks "$TUNWG") p0=$(ticks "$PEERWG")
    out=$(env $CHILD=wgclient ip netns exec $T "$TESTBIN" -stack host -server 198.19.100.2:5300 -test download -n $n) ||
        die "the client in the ustack tun -wg sandbox failed"
    t1=$(ticks "$TUNWG") p1=$(ticks "$PEERWG")
    echo "$out" | jq -r '"\(.bytes * 8 / .seconds / 1e6 | floor) \(.cpu_seconds)"' |
        awk -v t=$((t1 - t0)) -v hz="$HZ" -v b="$n" -v p="$(perGB $((p1 - p0)) "$n")" '{ printf "%s %.2f %s\n", $1, (t / hz + $2) / (b / 1e9), p }'
}

echo "wg.sh: $REPS rounds of: exit ustack, exit kernel, each client test with wgnet and netstack, ustack tun -wg" >&2
for r in $(seq "$REPS"); do
    if [[ " $PARTS " == *" exit "* ]]; then
        for e in ustack kernel; do exit_run $e >>"$WORK/exit.$e"; done
    fi
    if [[ " $PARTS " == *" client "* ]]; then
        for t in download upload rr; do
            for s in wgnet netstack; do client_run $s $t >>"$WORK/client.$s.$t"; done
        done
    fi
    if [[ " $PARTS " == *" tunwg "* ]]; then
        tunwg_run >>"$WORK/tunwg"
    fi
    echo "wg.sh: round $r done" >&2
done
for f in exit.ustack exit.kernel client.{wgnet,netstack}.{download,upload,rr} tunwg; do
    [ -e "$WORK/$f" ] || echo "- - - -" >"$WORK/$f" # a part not run
done

# median FILE COLUMN
median() { awk -v c="$2" '{ print $c }' "$1" | sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }

ue=$(median "$WORK/exit.ustack" 1) ke=$(median "$WORK/exit.kernel" 1)
up=$(median "$WORK/exit.ustack" 2) kp=$(median "$WORK/exit.kernel" 2)
cat <<EOF

ustack wg against a real wireguard-go peer, MTU 1420, $SIZE MiB per transfer, $RR round trips, medians of $REPS alternating rounds
(shared machine: compare the ratios, not the absolute numbers)

| measure | ustack | baseline | ratio | target |
|---|---|---|---|---|
| \`ustack wg\` exit node / the same wireguard-go as a kernel-forwarding exit (NAT in a namespace), download Mbit/s | $ue | $ke | $(ratio "$ue" "$ke") | >= 0.9x (stretch 1.0x) |
| packets the peer's veth receives per MiB, ustack exit / kernel exit | $up | $kp | $(ratio "$up" "$kp") | <= 1.1x |
EOF
for t in download upload rr; do
    w=$(median "$WORK/client.wgnet.$t" 1) n=$(median "$WORK/client.netstack.$t" 1)
    case $t in
    download) m="wgnet client download / wireguard-go netstack client, same peer, Mbit/s" tgt=">= 2x" ;;
    upload) m="wgnet client upload / netstack client upload, Mbit/s" tgt=">= 2x" ;;
    rr) m="wgnet client round trips / netstack client round trips, per second" tgt=">= 1.0x" ;;
    esac
    echo "| $m | $w | $n | $(ratio "$w" "$n") | $tgt |"
done
tw=$(median "$WORK/tunwg" 1) w=$(median "$WORK/client.wgnet.download" 1)
echo "| \`ustack tun -wg\` download / wgnet client download, Mbit/s | $tw | $w | $(ratio "$tw" "$w") | >= 0.9x |"
cat <<EOF

CPU seconds per GB moved (medians; processes only: the kernel exit's forwarding and NAT, in softirq, are not counted)

| configuration | this end | the peer's wireguard-go |
|---|---|---|
| ustack wg exit (its processes) | $(median "$WORK/exit.ustack" 3) | $(median "$WORK/exit.ustack" 4) |
| kernel exit (its wireguard-go) | $(median "$WORK/exit.kernel" 3) | $(median "$WORK/exit.kernel" 4) |
EOF
for t in download upload; do
    for s in wgnet netstack; do
        echo "| $s client $t | $(median "$WORK/client.$s.$t" 2) | $(median "$WORK/client.$s.$t" 3) |"
    done
done
echo "| ustack tun -wg download (its processes and the client in the sandbox) | $(median "$WORK/tunwg" 2) | $(median "$WORK/tunwg" 3) |"
cat <<EOF

Commands (in namespaces of their own; SIZE=$SIZE RR=$RR REPS=$REPS):
  exit:    ip netns exec UEXIT $UCMD
           kernel exit: wireguard-go -f wgk + ip_forward + nft masquerade
           peer: ip netns exec PEER iperf3 -c $SERVER -R -n ${SIZE}M -J
  client:  $CHILD=wgclient integration.test -stack wgnet|netstack -test download|upload|rr -n N
           (server: $CHILD=wgserver integration.test 198.19.100.2:5300 behind the peer)
  tunwg:   ip netns exec UEXIT $TCMD
           ip netns exec T $CHILD=wgclient integration.test -stack host -test download -n N
EOF
