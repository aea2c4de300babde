#!/bin/bash
# flows.sh - the cost of idle TCP flows through a sandbox's network: a
# client inside `ustack tun` (and, for comparison, pasta) opens N TCP
# flows to a server on the host's loopback, each carrying one byte each
# way (echoed), and holds them. Reports the time to establish them all,
# the relay's CPU time per flow while establishing them (user+system,
# microseconds), its VmRSS before and with the flows held, and KiB per
# flow; alternates the peers REPS times and prints the medians. Each run
# gets a fresh server, so no peer inherits another's warmed-up (or
# exhausted) server. The flow-cost companion of scripts/tun-rr.sh
# (latency) for issue 16. Setup time on a busy machine is mostly waiting:
# the relay's CPU per flow is the steadier figure.
#
# Needs root, pasta (Debian package passt) for the pasta row, and a Go
# toolchain (it builds internal/flowload/flowload, and ustack unless USTACK
# names a binary). Everything it creates (processes, files) is removed on
# exit; no traffic leaves loopback and the namespaces the peers create.
#
# Env: N [10000] flows, CONC [32] connecting at once (ustack refuses SYNs
#      beyond a quarter of -max-half-open, 256, towards one destination),
#      REPS [3], PORT [5421], SETTLE [2] seconds between establishing and
#      reading VmRSS, USTACK [built here], PEERS ["ustack pasta"]; the
#      peer "base" is a second ustack binary, BASE (an older build, for a
#      before/after in one run)
set -u
export LC_ALL=C
N=${N:-10000} CONC=${CONC:-32} REPS=${REPS:-3} PORT=${PORT:-5421} SETTLE=${SETTLE:-2}
PEERS=${PEERS:-"ustack pasta"}
[ "$(id -u)" = 0 ] || { echo "flows.sh: must run as root" >&2; exit 1; }
for t in go ip; do
    command -v "$t" >/dev/null || { echo "flows.sh: missing $t" >&2; exit 1; }
done
case " $PEERS " in *" base "*)
    [ -x "${BASE:-}" ] || { echo "flows.sh: peer base needs BASE, a ustack binary" >&2; exit 1; } ;;
esac
case " $PEERS " in *" pasta "*)
    command -v pasta >/dev/null || { echo "flows.sh: missing pasta (apt-get install passt)" >&2; exit 1; } ;;
esac
# Every flow is a descriptor in the server and the client, and one to
# several in the relay (pasta splices loopback flows through pipes).
need=$((8 * N + 1024))
if [ "$(ulimit -Hn)" -lt "$need" ] && ! ulimit -Hn "$need" 2>/dev/null; then
    echo "flows.sh: cannot raise the descriptor limit to $need (hard limit $(ulimit -Hn), no CAP_SYS_RESOURCE?): a relay may run out" >&2
fi
ulimit -n "$(ulimit -Hn)"
# pasta needs about two descriptors per flow (it timed out from flow 9,900
# of 10,000 at a hard limit of 20,000): short of that it times out flow
# after flow near the limit, which costs minutes and measures nothing.
case " $PEERS " in *" pasta "*)
    if [ "$(ulimit -Hn)" -lt $((2 * N + 512)) ]; then
        echo "flows.sh: leaving pasta out: it needs about $((2 * N + 512)) descriptors for $N flows and the hard limit is $(ulimit -Hn) (lower N, or raise the limit)" >&2
        PEERS=$(echo " $PEERS " | sed 's/ pasta / /; s/^ *//; s/ *$//')
    fi ;;
esac
[ -n "$PEERS" ] || { echo "flows.sh: no peer left to run" >&2; exit 1; }
WORK=$(mktemp -d -t flows.XXXXXX)
# The server and the relay of the run in progress, for cleanup; each is
# forgotten once reaped, since its pid may then be reused.
SPID= RPID=
cleanup() {
    local p
    for p in $RPID $SPID; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ROOT=$(cd "$(dirname "$0")/.." && pwd)
(cd "$ROOT" && go build -o "$WORK/flowload" ./internal/flowload/flowload) || exit 1
if [ -z "${USTACK:-}" ]; then
    USTACK=$WORK/ustack
    (cd "$ROOT" && go build -o "$USTACK" ./cmd/ustack) || exit 1
fi
GW=$(ip -4 route show default | awk '/^default/{print $3; exit}')

rss() { awk '/^VmRSS:/{print $2}' "/proc/$1/status" 2>/dev/null; }   # KiB
TICK=$(getconf CLK_TCK)
# cpu PID: the process's own user+system CPU so far, in microseconds
# (fields 14 and 15 of /proc/PID/stat, counted after the command name,
# which may hold spaces).
cpu() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk -v t="$TICK" '{printf "%.0f\n", ($12 + $13) * 1000000 / t}'; }
run_peer() {   # run_peer NAME -> prints "seconds rss_before_kib rss_held_kib kib_per_flow relay_cpu_us_per_flow"
    local out=$WORK/$1.out pid r0 r1 c0 c1 t i
    rm -f "$WORK/start" "$WORK/hold" "$out" "$WORK/server.log"
    "$WORK/flowload" serve "127.0.0.1:$PORT" >"$WORK/server.log" 2>&1 &
    SPID=$!
    for i in $(seq 50); do grep -q listening "$WORK/server.log" && break; sleep 0.1; done
    if ! grep -q listening "$WORK/server.log"; then
        echo "flows.sh: server: $(cat "$WORK/server.log")" >&2
        kill "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; SPID=
        echo fail; return
    fi
    local client=("$WORK/flowload" open -n "$N" -c "$CONC" -start "$WORK/start" -hold "$WORK/hold")
    case $1 in
        ustack|base) "$([ "$1" = base ] && echo "$BASE" || echo "$USTACK")" tun -allow-host-loopback -max-flows -1 -max-tcp -1 -memory-budget -1 -- "${client[@]}" "198.18.0.1:$PORT" >"$out" 2>&1 & ;;
        pasta) pasta --runas 0 --config-net -q -f -- "${client[@]}" "$GW:$PORT" >"$out" 2>&1 & ;;
    esac
    pid=$! RPID=$!
    sleep 1   # the relay is up and idle; the client waits for start
    r0=$(rss "$pid")
    c0=$(cpu "$pid")
    touch "$WORK/start"
    for i in $(seq $((N / 10 + 600))); do
        grep -q -e established -e flowload: "$out" && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    c1=$(cpu "$pid")
    sleep "$SETTLE"
    r1=$(rss "$pid")
    touch "$WORK/hold"
    wait "$pid"
    RPID=
    kill "$SPID" 2>/dev/null
    wait "$SPID" 2>/dev/null
    SPID=
    cat "$out" >>"$WORK/$1.log"
    t=$(sed -n 's/^established [0-9]* flows in \([0-9.]*\) s$/\1/p' "$out")
    if [ -z "$t" ] || [ -z "$r0" ] || [ -z "$r1" ] || [ -z "$c0" ] || [ -z "$c1" ]; then echo fail; return; fi
    echo "$t $r0 $r1 $(echo "($r1 - $r0) / $N" | bc -l) $(echo "($c1 - $c0) / $N" | bc -l)"
}
declare -A RES
for r in $(seq "$REPS"); do
    for p in $PEERS; do RES[$p]+="$(run_peer "$p")"$'\n'; done
done
printf '# %s %s cpus, %d idle TCP flows (1 byte echoed each), %d connecting at once, %d runs (alternating); medians\n' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$N" "$CONC" "$REPS"
printf '%-8s %10s %12s %12s %12s %12s  %s\n' peer "setup s" "RSS0 KiB" "RSSheld KiB" "KiB/flow" "CPU us/flow" "runs (setup s, KiB/flow, CPU us/flow)"
med() { sort -g | awk '{a[NR]=$0} END{if(NR) print a[int((NR+1)/2)]}'; }
for p in $PEERS; do
    ok=$(printf '%s' "${RES[$p]}" | grep -E '^[0-9.]+ ')
    if [ -z "$ok" ]; then printf '%-8s %10s\n' "$p" fail; tail -3 "$WORK/$p.log" >&2; continue; fi
    col() { echo "$ok" | awk -v c="$1" '{print $c}' | med; }
    runs=$(printf '%s' "${RES[$p]}" | awk '{printf "%s%s", (NR>1?" ":""), ($5==""?"fail":sprintf("%.2f,%.1f,%.0f", $1, $4, $5))}')
    printf '%-8s %10.3f %12d %12d %12.1f %12.0f  %s\n' "$p" "$(col 1)" "$(col 2)" "$(col 3)" "$(col 4)" "$(col 5)" "$runs"
done
