#!/bin/bash
# http.sh - HTTP download throughput of `ustack serve` against the same
# services and handler on the kernel's sockets (`ustack serve -stack
# kernel`), over one veth pair: curl fetches /bytes/SIZE (a body checked by
# serve.CheckBody in the tests, cheap to produce) from a client namespace,
# the server runs on the pair's other end, in a server namespace. The two
# servers alternate REPS times; the script prints each one's median
# Gbit/s and the ratio ustack/kernel (issue 16's target: at least 0.8x).
# With USTACK_BASE, a second ustack binary (an older build) runs in the
# same alternation, for a before/after in one run.
#
# The server's end sits in a namespace of its own rather than in the root
# namespace, so that nothing there changes (no address; no root kernel
# forwarding the frames AF_PACKET shares with it; no root firewall rules
# taxing only the kernel's run). In the ustack runs that end has no
# address and no IPv6 (AF_PACKET shares the interface with the kernel);
# in the kernel runs it gets ustack's address for the run.
#
# Needs root, curl and iproute2, and a built ustack (USTACK, default: go
# build into a temporary directory). Everything it creates (two
# namespaces with the veth pair, processes, a work directory) is removed
# on exit; no traffic leaves the namespaces it creates.
#
# Env: SIZE [268435456] bytes per download, REPS [5], PORT [80],
#      USTACK [built here], USTACK_FLAGS [""] extra `ustack serve` flags
#      (ustack runs; e.g. "-qdisc llist" or "-cpuprofile /tmp/p"),
#      USTACK_BASE [""] an older ustack binary to run too, KEEP=1 keeps
#      the work directory (server logs, curl output, each server's status
#      page after its download), SERVERS ["[base]
#      ustack kernel"] which servers run, in this order (e.g. "ustack" alone
#      under perf record -a).
set -u
export LC_ALL=C
SIZE=${SIZE:-268435456} REPS=${REPS:-5} PORT=${PORT:-80}
USTACK_FLAGS=${USTACK_FLAGS:-} USTACK_BASE=${USTACK_BASE:-}
[ "$(id -u)" = 0 ] || { echo "http.sh: must run as root" >&2; exit 1; }
for t in curl ip timeout; do
    command -v "$t" >/dev/null || { echo "http.sh: missing $t (apt-get install curl iproute2 coreutils)" >&2; exit 1; }
done
WORK=$(mktemp -d -t http.XXXXXX)
NSS=http-s-$$ NSC=http-c-$$   # server and client namespaces
DEVS=veth-s DEVC=veth-c
ADDRS=198.18.91.2/24 ADDRC=198.18.91.1/24 SERVER=198.18.91.2
SRV=
cleanup() {
    stop_server
    ip netns del "$NSS" 2>/dev/null
    ip netns del "$NSC" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "http.sh: kept $WORK" >&2 || rm -rf "$WORK"
}
stop_server() {
    [ -n "$SRV" ] || return 0
    kill -INT "$SRV" 2>/dev/null
    wait "$SRV" 2>/dev/null
    SRV=
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${USTACK:-}" ]; then
    USTACK=$WORK/ustack
    (cd "$(dirname "$0")/.." && go build -o "$USTACK" ./cmd/ustack) || exit 1
fi
ip netns add "$NSS" && ip netns add "$NSC" || exit 1
ip link add "$DEVS" netns "$NSS" type veth peer name "$DEVC" netns "$NSC" || exit 1
ip -n "$NSS" link set lo up && ip -n "$NSC" link set lo up || exit 1
ip netns exec "$NSS" sysctl -qw "net.ipv6.conf.$DEVS.disable_ipv6=1" || exit 1
ip -n "$NSC" addr add "$ADDRC" dev "$DEVC" || exit 1
ip -n "$NSS" link set "$DEVS" up && ip -n "$NSC" link set "$DEVC" up || exit 1

# start_server NAME N: starts that server in the server namespace, and
# waits until it answers the client.
start_server() {
    local log=$WORK/$1.$2.log
    case $1 in
        ustack) ip netns exec "$NSS" "$USTACK" serve -link "afpacket:$DEVS" -addr "$ADDRS" -http "$PORT" $USTACK_FLAGS >"$log" 2>&1 & ;;
        base) ip netns exec "$NSS" "$USTACK_BASE" serve -link "afpacket:$DEVS" -addr "$ADDRS" -http "$PORT" >"$log" 2>&1 & ;;
        kernel)
            ip -n "$NSS" addr add "$ADDRS" dev "$DEVS" || return 1
            ip netns exec "$NSS" "$USTACK" serve -stack kernel -http "$PORT" >"$log" 2>&1 & ;;
    esac
    SRV=$!
    local i
    for i in $(seq 100); do
        ip netns exec "$NSC" curl -sf -m 1 -o /dev/null "http://$SERVER:$PORT/" && return 0
        kill -0 "$SRV" 2>/dev/null || break
        sleep 0.1
    done
    echo "http.sh: $1 server did not answer (log: $log)" >&2
    return 1
}
# run NAME N -> Gbit/s of one download, or "fail"
run() {
    local out res=fail
    if start_server "$1" "$2"; then
        out=$(ip netns exec "$NSC" timeout 300 curl -sS -o /dev/null -w '%{size_download} %{speed_download}' \
            "http://$SERVER:$PORT/bytes/$SIZE" 2>>"$WORK/curl.log")
        echo "$1.$2: $out" >>"$WORK/curl.log"
        # The server's status page after the download (its counters), kept
        # with KEEP=1.
        ip netns exec "$NSC" curl -sf -m 5 -o "$WORK/$1.$2.status" "http://$SERVER:$PORT/" 2>/dev/null
        set -- $1 $2 $out
        [ "${3:-}" = "$SIZE" ] && res=$(echo "$4 * 8 / 1000000000" | bc -l)
    fi
    stop_server
    [ "$1" = kernel ] && ip -n "$NSS" addr del "$ADDRS" dev "$DEVS" 2>/dev/null
    printf '%.2f\n' "$res" 2>/dev/null || echo fail
}
median() { # median of the numeric arguments, or "fail"
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
        awk '{a[NR]=$1} END{if(!NR){print "fail"; exit} printf "%.2f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}
if [ -z "${SERVERS:-}" ]; then
    SERVERS="ustack kernel"
    [ -n "$USTACK_BASE" ] && SERVERS="base $SERVERS"
fi
declare -A RES
for r in $(seq "$REPS"); do
    for s in $SERVERS; do RES[$s]+="$(run "$s" "$r") "; done
done
printf '# %s %s cpus, curl /bytes/%d over veth, %d runs (alternating); Gbit/s\n' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$SIZE" "$REPS"
K=$(median ${RES[kernel]:-})
printf '%-8s %8s %8s  %s\n' server median /kernel runs
for s in $SERVERS; do
    m=$(median ${RES[$s]})
    ratio=-
    [ "$m" != fail ] && [ "$K" != fail ] && ratio=$(printf '%.2fx' "$(echo "$m / $K" | bc -l)")
    printf '%-8s %8s %8s  %s\n' "$s" "$m" "$ratio" "$(echo ${RES[$s]} | tr ' ' /)"
done
