#!/bin/bash
# peers.sh - TCP throughput through a sandbox's userspace network: iperf3
# from inside a network namespace to a server on the host's loopback, up
# (sandbox -> host) and down (-R), through slirp4netns, pasta and
# `ustack tun`, in one run. The peers alternate (A B C A B C ...) REPS
# times, and each cell is the median of its runs, receiver side, so that
# the ratios between peers come from one run of one machine. The companion
# of tun-rr.sh (latency).
#
# Needs root, iperf3, jq, slirp4netns and pasta (Debian: iperf3 jq
# slirp4netns passt), and a built ustack (USTACK, default: go build into a
# temporary directory). Everything it creates (namespaces, processes, a
# work directory) is removed on exit; no traffic leaves loopback and the
# namespaces it creates.
#
# A peer named NAME:u runs unprivileged, as the user RUNAS, the way a
# rootless tool runs it: slirp4netns serving a namespace the user made
# with `unshare -rn`, pasta and `ustack tun` making their own user
# namespace. /dev/net/tun is made mode 0666 for the run, as distributions
# ship it, and restored on exit. ustack-noseccomp is ustack with
# -seccomp=false (confinement off), to measure what confinement costs.
# The peer base is a second ustack binary, BASE (an older build), for a
# before/after in one run.
#   PEERS="slirp4netns slirp4netns:u pasta pasta:u ustack ustack:u" peers.sh
#
# Env: DUR [5] seconds per direction, REPS [3], PORT [5301], MTU [65520],
#      USTACK [built here], USTACK_FLAGS [""] extra `ustack tun` flags,
#      PEERS ["slirp4netns pasta ustack"], RUNAS [ustack-test] the user of
#      the :u peers (useradd -M -s /bin/sh ustack-test), KEEP=1 keeps the
#      work directory, BASE the binary of the peer base.
set -u
export LC_ALL=C
DUR=${DUR:-5} REPS=${REPS:-3} PORT=${PORT:-5301} MTU=${MTU:-65520}
PEERS=${PEERS:-"slirp4netns pasta ustack"}
USTACK_FLAGS=${USTACK_FLAGS:-}
RUNAS=${RUNAS:-ustack-test}
[ "$(id -u)" = 0 ] || { echo "peers.sh: must run as root (the :u peers switch to RUNAS themselves)" >&2; exit 1; }
for t in iperf3 jq slirp4netns pasta ip timeout; do
    command -v "$t" >/dev/null || { echo "peers.sh: missing $t (apt-get install iperf3 jq slirp4netns passt iproute2)" >&2; exit 1; }
done
WORK=$(mktemp -d -t peers.XXXXXX)
NS=peers-$$
PIDS=()
TUNMODE=
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    ip netns del "$NS" 2>/dev/null
    [ -n "$TUNMODE" ] && chmod "$TUNMODE" /dev/net/tun
    [ -n "${KEEP:-}" ] && echo "peers.sh: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${USTACK:-}" ]; then
    USTACK=$WORK/ustack
    (cd "$(dirname "$0")/.." && go build -o "$USTACK" ./cmd/ustack) || exit 1
fi
iperf3 -s -p "$PORT" --bind 127.0.0.1 >"$WORK/server.log" 2>&1 &
PIDS+=($!)
# slirp4netns serves a namespace that exists before it starts; it maps
# 10.0.2.2 to the host's loopback.
case " $PEERS " in *" base "*)
    [ -x "${BASE:-}" ] || { echo "peers.sh: peer base needs BASE, a ustack binary" >&2; exit 1; } ;;
esac
case " $PEERS " in *" slirp4netns "*)
    ip netns add "$NS" || exit 1
    slirp4netns --configure --mtu="$MTU" --netns-type=path "/var/run/netns/$NS" tap0 >"$WORK/slirp.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do ip -n "$NS" -4 addr show dev tap0 2>/dev/null | grep -q 'inet ' && break; sleep 0.1; done
esac
case " $PEERS " in *:u" "*)
    for t in setpriv unshare nsenter; do
        command -v "$t" >/dev/null || { echo "peers.sh: missing $t (apt-get install util-linux)" >&2; exit 1; }
    done
    RUID=$(id -u "$RUNAS" 2>/dev/null) || { echo "peers.sh: no user $RUNAS for the :u peers: useradd -M -s /bin/sh $RUNAS, or set RUNAS" >&2; exit 1; }
    RGID=$(id -g "$RUNAS")
    TUNMODE=$(stat -c %a /dev/net/tun) && chmod 0666 /dev/net/tun
    # A copy the user may execute, wherever USTACK is.
    chmod 0755 "$WORK" && cp "$USTACK" "$WORK/ustack-u" && chmod 0755 "$WORK/ustack-u" && USTACK=$WORK/ustack-u
    # The user's own network namespace for slirp4netns:u, held by sleep.
    case " $PEERS " in *" slirp4netns:u "*)
        setpriv --reuid="$RUID" --regid="$RGID" --clear-groups unshare -rn sleep infinity &
        HOLDER=$!
        PIDS+=($HOLDER)
        for _ in $(seq 50); do [ "$(cat /proc/$HOLDER/comm 2>/dev/null)" = sleep ] && break; sleep 0.1; done
        setpriv --reuid="$RUID" --regid="$RGID" --clear-groups slirp4netns --configure --mtu="$MTU" "$HOLDER" tap0 >"$WORK/slirp-u.log" 2>&1 &
        PIDS+=($!)
        for _ in $(seq 50); do nsenter -t "$HOLDER" -n ip -4 addr show dev tap0 2>/dev/null | grep -q 'inet ' && break; sleep 0.1; done
    esac
esac
# pasta maps the host's default gateway address to the host's loopback.
GW=$(ip -4 route show default | awk '/^default/{print $3; exit}')
for _ in $(seq 50); do ss -Hltn "sport = :$PORT" | grep -q . && break; sleep 0.1; done

# client PEER -> the command that runs iperf3 (its further arguments
# appended) inside that peer's sandbox, as RUNAS for NAME:u
client() {
    local as=
    case $1 in *:u) as="setpriv --reuid=$RUID --regid=$RGID --clear-groups" ;; esac
    case $1 in
        slirp4netns) echo ip netns exec "$NS" iperf3 -c 10.0.2.2 ;;
        slirp4netns:u) echo "$as" nsenter -t "$HOLDER" -U --preserve-credentials -n iperf3 -c 10.0.2.2 ;;
        pasta) echo pasta --runas 0 --config-net -q -f -- iperf3 -c "$GW" ;;
        pasta:u) echo "$as" pasta --config-net -q -f -- iperf3 -c "$GW" ;;
        ustack|ustack:u) echo "$as" "$USTACK" tun -allow-host-loopback -mtu "$MTU" $USTACK_FLAGS -- iperf3 -c 198.18.0.1 ;;
        base) echo "$BASE" tun -allow-host-loopback -mtu "$MTU" $USTACK_FLAGS -- iperf3 -c 198.18.0.1 ;;
        ustack-noseccomp|ustack-noseccomp:u) echo "$as" "$USTACK" tun -seccomp=false -allow-host-loopback -mtu "$MTU" $USTACK_FLAGS -- iperf3 -c 198.18.0.1 ;;
        *) echo "peers.sh: unknown peer $1" >&2; echo false ;;
    esac
}
# run PEER DIR(up|dn) N -> "Gbit/s retransmits", receiver side
run() {
    local f=$WORK/${1/:/-}.$2.$3.json rev=
    [ "$2" = dn ] && rev=-R
    timeout -k 5 $((DUR + 30)) $(client "$1") -p "$PORT" -t "$DUR" -J $rev >"$f" 2>"$f.err"
    jq -r 'if (.error // "") != "" then "fail -" else
        "\((.end.sum_received.bits_per_second // 0) / 1e9 * 100 | round / 100) \(.end.sum_sent.retransmits // "-")" end' "$f" 2>/dev/null || echo "fail -"
}
median() { # median of the numeric arguments, or "fail"
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
        awk '{a[NR]=$1} END{if(!NR){print "fail"; exit} printf "%.2f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}
[ -n "$GW" ] || echo "peers.sh: no default route: pasta has no gateway address to map to the host" >&2
declare -A UP DN RUP RDN
for r in $(seq "$REPS"); do
    for p in $PEERS; do
        read -r g x < <(run "$p" up "$r"); UP[$p]+="$g "; RUP[$p]+="${RUP[$p]:+/}$x"
        read -r g x < <(run "$p" dn "$r"); DN[$p]+="$g "; RDN[$p]+="${RDN[$p]:+/}$x"
    done
done
printf '# %s, %s cpus, iperf3 %ss each way x %d runs (alternating), MTU %s; Gbit/s received (median), and each run\n' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$DUR" "$REPS" "$MTU"
printf '%-20s %7s %7s  %-23s %-23s %s\n' peer up down "runs up" "runs down" "retransmits up / down"
for p in $PEERS; do
    # shellcheck disable=SC2086
    printf '%-20s %7s %7s  %-23s %-23s %s / %s\n' "$p" "$(median ${UP[$p]})" "$(median ${DN[$p]})" \
        "$(echo ${UP[$p]} | tr ' ' /)" "$(echo ${DN[$p]} | tr ' ' /)" "${RUP[$p]}" "${RDN[$p]}"
done
