#!/bin/bash
# tun-rr.sh - TCP request/response latency (sockperf ping-pong, 64-byte
# messages) from a network namespace to a server on the host's loopback,
# through slirp4netns, pasta and `ustack tun`, in one run, alternating the
# peers REPS times; prints the median of each peer's average latency and
# its p50/p99 of the median run, then the issue's targets as ratios (avg
# to slirp4netns's and the kernel's, p99 to pasta's). It also prints the
# whole machine's CPU time per round trip (user+system+irq of every CPU
# from /proc/stat, over the run: relay, kernel, client and server), the
# cost that latency alone hides; it is meaningful only on an otherwise
# quiet machine. The companion of scripts/peers.sh (throughput) for the
# sandbox issue.
#
# Needs root, sockperf, slirp4netns and pasta (Debian packages), and a built
# ustack (USTACK, default: go build into a temporary directory). Everything
# it creates (namespaces, processes) is removed on exit; no traffic leaves
# loopback and the namespaces it creates.
#
# A peer named NAME:u runs unprivileged, as the user RUNAS, the way a
# rootless tool runs it: slirp4netns serving a namespace the user made
# with `unshare -rn`, pasta and `ustack tun` making their own user
# namespace. /dev/net/tun is made mode 0666 for the run, as distributions
# ship it, and restored on exit. ustack-noseccomp is ustack with
# -seccomp=false (confinement off), to measure what confinement costs.
# The peer base is a second ustack binary, BASE (an older build), for a
# before/after in one run.
#   PEERS="kernel slirp4netns slirp4netns:u pasta pasta:u ustack ustack:u" tun-rr.sh
#
# Env: DUR [5] seconds per run, REPS [3], PORT [5401], MSG [64] bytes,
#      USTACK [built here], PEERS ["kernel slirp4netns pasta ustack"],
#      RUNAS [ustack-test] the user of the :u peers (useradd -M -s /bin/sh
#      ustack-test), BASE the binary of the peer base
set -u
export LC_ALL=C
DUR=${DUR:-5} REPS=${REPS:-3} PORT=${PORT:-5401} MSG=${MSG:-64}
PEERS=${PEERS:-"kernel slirp4netns pasta ustack"}
RUNAS=${RUNAS:-ustack-test}
[ "$(id -u)" = 0 ] || { echo "tun-rr.sh: must run as root (the :u peers switch to RUNAS themselves)" >&2; exit 1; }
for t in sockperf slirp4netns pasta ip; do
    command -v "$t" >/dev/null || { echo "tun-rr.sh: missing $t (apt-get install sockperf slirp4netns passt)" >&2; exit 1; }
done
WORK=$(mktemp -d -t tun-rr.XXXXXX)
NS=tunrr-$$
PIDS=()
TUNMODE=
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    ip netns del "$NS" 2>/dev/null
    [ -n "$TUNMODE" ] && chmod "$TUNMODE" /dev/net/tun
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${USTACK:-}" ]; then
    USTACK=$WORK/ustack
    (cd "$(dirname "$0")/.." && go build -o "$USTACK" ./cmd/ustack) || exit 1
fi
sockperf server --tcp -i 127.0.0.1 -p "$PORT" >"$WORK/server.log" 2>&1 &
PIDS+=($!)
case " $PEERS " in *" base "*)
    [ -x "${BASE:-}" ] || { echo "tun-rr.sh: peer base needs BASE, a ustack binary" >&2; exit 1; } ;;
esac
case " $PEERS " in *" slirp4netns "*)
    ip netns add "$NS" || exit 1
    slirp4netns --configure --mtu=65520 --netns-type=path "/var/run/netns/$NS" tap0 >"$WORK/slirp.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 50); do ip -n "$NS" -4 addr show dev tap0 2>/dev/null | grep -q 'inet ' && break; sleep 0.1; done
esac
AS=
case " $PEERS " in *:u" "*)
    for t in setpriv unshare nsenter; do
        command -v "$t" >/dev/null || { echo "tun-rr.sh: missing $t (apt-get install util-linux)" >&2; exit 1; }
    done
    RUID=$(id -u "$RUNAS" 2>/dev/null) || { echo "tun-rr.sh: no user $RUNAS for the :u peers: useradd -M -s /bin/sh $RUNAS, or set RUNAS" >&2; exit 1; }
    AS="setpriv --reuid=$RUID --regid=$(id -g "$RUNAS") --clear-groups"
    TUNMODE=$(stat -c %a /dev/net/tun) && chmod 0666 /dev/net/tun
    # A copy the user may execute, wherever USTACK is.
    chmod 0755 "$WORK" && cp "$USTACK" "$WORK/ustack-u" && chmod 0755 "$WORK/ustack-u" && USTACK=$WORK/ustack-u
    # The user's own network namespace for slirp4netns:u, held by sleep.
    case " $PEERS " in *" slirp4netns:u "*)
        $AS unshare -rn sleep infinity &
        HOLDER=$!
        PIDS+=($HOLDER)
        for _ in $(seq 50); do [ "$(cat /proc/$HOLDER/comm 2>/dev/null)" = sleep ] && break; sleep 0.1; done
        $AS slirp4netns --configure --mtu=65520 "$HOLDER" tap0 >"$WORK/slirp-u.log" 2>&1 &
        PIDS+=($!)
        for _ in $(seq 50); do nsenter -t "$HOLDER" -n ip -4 addr show dev tap0 2>/dev/null | grep -q 'inet ' && break; sleep 0.1; done
    esac
esac
GW=$(ip -4 route show default | awk '/^default/{print $3; exit}')
sleep 0.5

client() { echo sockperf ping-pong --tcp -p "$PORT" -m "$MSG" -t "$DUR" -i "$1"; }
TICK=$(getconf CLK_TCK)
# busy: every CPU's non-idle time so far, in microseconds (user, nice,
# system, irq, softirq, steal of /proc/stat's first line).
busy() { awk -v t="$TICK" '/^cpu /{printf "%.0f\n", ($2 + $3 + $4 + $7 + $8 + $9) * 1000000 / t; exit}' /proc/stat; }
run_peer() {   # run_peer NAME -> prints "avg p50 p99 cpu_us_per_round_trip" (latency in usec)
    local out b0 b1
    b0=$(busy)
    case $1 in
        kernel) out=$($(client 127.0.0.1) 2>&1) ;;
        slirp4netns) out=$(ip netns exec "$NS" $(client 10.0.2.2) 2>&1) ;;
        slirp4netns:u) out=$($AS nsenter -t "$HOLDER" -U --preserve-credentials -n $(client 10.0.2.2) 2>&1) ;;
        pasta) out=$(pasta --runas 0 --config-net -q -f -- $(client "$GW") 2>&1) ;;
        pasta:u) out=$($AS pasta --config-net -q -f -- $(client "$GW") 2>&1) ;;
        ustack) out=$("$USTACK" tun -allow-host-loopback -- $(client 198.18.0.1) 2>&1) ;;
        base) out=$("$BASE" tun -allow-host-loopback -- $(client 198.18.0.1) 2>&1) ;;
        ustack:u) out=$($AS "$USTACK" tun -allow-host-loopback -- $(client 198.18.0.1) 2>&1) ;;
        ustack-noseccomp) out=$("$USTACK" tun -seccomp=false -allow-host-loopback -- $(client 198.18.0.1) 2>&1) ;;
        ustack-noseccomp:u) out=$($AS "$USTACK" tun -seccomp=false -allow-host-loopback -- $(client 198.18.0.1) 2>&1) ;;
        *) out="tun-rr.sh: unknown peer $1" ;;
    esac
    b1=$(busy)
    echo "$out" >>"$WORK/${1/:/-}.log"
    local avg p50 p99 rtts cpu=fail
    avg=$(echo "$out" | sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' | tail -1)
    p50=$(echo "$out" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | tail -1)
    p99=$(echo "$out" | sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' | tail -1)
    # The CPU time spans the whole command (the relay's start and
    # sockperf's warm-up too, which a long-running slirp4netns does not
    # pay here: a fraction of a microsecond per round trip at DUR 5);
    # sockperf counts round trips after its warm-up, so scale them to it.
    rtts=$(echo "$out" | sed -n 's/.*RunTime=\([0-9.]*\) sec; Warm up time=\([0-9]*\) msec;.*ReceivedMessages=\([0-9]*\).*/\3 * (\1 + \2 \/ 1000) \/ \1/p' | tail -1)
    [ -n "$rtts" ] && rtts=$(echo "$rtts" | bc -l)
    [ -n "$rtts" ] && [ "$(echo "$rtts > 0" | bc)" = 1 ] && cpu=$(echo "($b1 - $b0) / $rtts" | bc -l)
    echo "${avg:-fail} ${p50:-fail} ${p99:-fail} $cpu"
}
declare -A RES AVG P99
for r in $(seq "$REPS"); do
    for p in $PEERS; do RES[$p]+="$(run_peer "$p")"$'\n'; done
done
printf '# %s %s cpus, sockperf TCP ping-pong %dB, %ss x %d runs (alternating); latency usec (half round trip, as sockperf reports)\n' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$MSG" "$DUR" "$REPS"
printf '%-20s %9s %9s %9s %12s %12s  %s\n' peer avg p50 p99 "trans/s" "cpu_us/rt" runs
for p in $PEERS; do
    # the run with the median average
    line=$(printf '%s' "${RES[$p]}" | grep -E '^[0-9.]+ ' | sort -g | awk '{a[NR]=$0} END{if(NR) print a[int((NR+1)/2)]}')
    runs=$(printf '%s' "${RES[$p]}" | awk '{printf "%s%s", (NR>1?"/":""), $1}')
    if [ -z "$line" ]; then printf '%-20s %9s\n' "$p" fail; continue; fi
    set -- $line
    cpu=$4
    [ "$cpu" != fail ] && cpu=$(printf '%.1f' "$cpu")
    printf '%-20s %9s %9s %9s %12.0f %12s  %s\n' "$p" "$1" "$2" "$3" "$(echo "1000000 / (2 * $1)" | bc -l)" "$cpu" "$runs"
    AVG[$p]=$1 P99[$p]=$3
done
# The issue's targets as ratios: each peer's avg to slirp4netns's and the
# kernel's, its p99 to pasta's (the reference peers that ran).
declare -A REF=([slirp4netns]=AVG [kernel]=AVG [pasta]=P99)
for r in slirp4netns kernel pasta; do
    declare -n col=${REF[$r]}
    [ -n "${col[$r]:-}" ] || continue
    printf '# %s / %s:' "${REF[$r],,}" "$r"
    for p in $PEERS; do
        [ "$p" != "$r" ] && [ -n "${col[$p]:-}" ] && printf ' %s %.2fx' "$p" "$(echo "${col[$p]} / ${col[$r]}" | bc -l)"
    done
    echo
    unset -n col
done
