#!/bin/bash
# pollcost.sh - what Go's network poller and scheduler cost a relay per
# message: sockperf TCP ping-pong (64-byte messages) on loopback through
# internal/pollcost's relay, once with its goroutines parked in Go's poller
# (mode poller, the way every relay of this module waits) and once with
# one goroutine blocking in an epoll of its own (mode loop, the way
# slirp4netns's event loop waits), alternating REPS times. Prints each
# mode's median average latency, its p50/p99, and the relay's own CPU per
# round trip (user+system from /proc), then loop/poller ratios. No gVisor,
# no TUN: the difference is the waiting alone. By default the relay runs
# as ustack tun runs its own: GOMAXPROCS 1, and the runtime's monitor
# thread (sysmon) kept on its slow tick (GODEBUG schedtrace, what `ustack
# tun -sysmon-tick` sets); SYSMON=default leaves sysmon as Go runs it,
# which ticks every 20 us around the loop's blocking epoll_pwait and wakes
# after every idle spell of the poller's. See docs/results.md.
#
# Needs sockperf (Debian package) and a Go toolchain; no root. Everything
# it starts is stopped on exit; no traffic leaves loopback.
#
# Env: DUR [5] seconds per run, REPS [5], PORT [5441] (the relay listens
#      on PORT+1), MSG [64] bytes, PROCS [1] the relay's GOMAXPROCS,
#      SYSMON [slow] or default: the monitor thread's tick
set -u
export LC_ALL=C
DUR=${DUR:-5} REPS=${REPS:-5} PORT=${PORT:-5441} MSG=${MSG:-64} PROCS=${PROCS:-1}
SYSMON=${SYSMON:-slow}
case $SYSMON in
    slow) RELAYDEBUG=${GODEBUG:+$GODEBUG,}schedtrace=2147483647 ;;
    default) RELAYDEBUG=${GODEBUG:-} ;;
    *) echo "pollcost.sh: SYSMON=$SYSMON: want slow or default" >&2; exit 2 ;;
esac
for t in sockperf go; do
    command -v "$t" >/dev/null || { echo "pollcost.sh: missing $t (apt-get install sockperf)" >&2; exit 1; }
done
WORK=$(mktemp -d -t pollcost.XXXXXX)
SPID= RPID=
cleanup() {
    local p
    for p in $RPID $SPID; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

(cd "$(dirname "$0")/.." && go build -o "$WORK/pollcost" ./internal/pollcost/pollcost) || exit 1
sockperf server --tcp -i 127.0.0.1 -p "$PORT" >"$WORK/server.log" 2>&1 &
SPID=$!
TICK=$(getconf CLK_TCK)
# cpu PID: the process's own user+system CPU so far, in microseconds.
cpu() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | awk -v t="$TICK" '{printf "%.0f\n", ($12 + $13) * 1000000 / t}'; }
run_mode() {   # run_mode MODE -> prints "avg p50 p99 relay_cpu_us_per_round_trip"
    local out c0 c1 i rtts
    GODEBUG=$RELAYDEBUG "$WORK/pollcost" -mode "$1" -procs "$PROCS" -listen "127.0.0.1:$((PORT + 1))" -to "127.0.0.1:$PORT" >"$WORK/relay.log" 2>&1 &
    RPID=$!
    for i in $(seq 50); do grep -q listening "$WORK/relay.log" && break; sleep 0.1; done
    if ! grep -q listening "$WORK/relay.log"; then
        echo "pollcost.sh: relay: $(cat "$WORK/relay.log")" >&2
        kill "$RPID" 2>/dev/null; wait "$RPID" 2>/dev/null; RPID=
        echo fail; return
    fi
    c0=$(cpu "$RPID")
    out=$(sockperf ping-pong --tcp -i 127.0.0.1 -p "$((PORT + 1))" -m "$MSG" -t "$DUR" 2>&1)
    c1=$(cpu "$RPID")
    kill "$RPID" 2>/dev/null; wait "$RPID" 2>/dev/null; RPID=
    echo "$out" >>"$WORK/$1.log"
    local avg p50 p99 cpu=fail
    avg=$(echo "$out" | sed -n 's/.*Summary: Latency is \([0-9.]*\) usec.*/\1/p' | tail -1)
    p50=$(echo "$out" | sed -n 's/.*percentile 50.000 = *\([0-9.]*\).*/\1/p' | tail -1)
    p99=$(echo "$out" | sed -n 's/.*percentile 99.000 = *\([0-9.]*\).*/\1/p' | tail -1)
    # The CPU spans the client's whole run, warm-up included; sockperf
    # counts round trips after its warm-up, so scale them to it.
    rtts=$(echo "$out" | sed -n 's/.*RunTime=\([0-9.]*\) sec; Warm up time=\([0-9]*\) msec;.*ReceivedMessages=\([0-9]*\).*/\3 * (\1 + \2 \/ 1000) \/ \1/p' | tail -1)
    [ -n "$rtts" ] && rtts=$(echo "$rtts" | bc -l)
    [ -n "$rtts" ] && [ -n "$c0" ] && [ -n "$c1" ] && [ "$(echo "$rtts > 0" | bc)" = 1 ] && cpu=$(echo "($c1 - $c0) / $rtts" | bc -l)
    echo "${avg:-fail} ${p50:-fail} ${p99:-fail} $cpu"
}
declare -A RES MED
for r in $(seq "$REPS"); do
    for m in poller loop; do RES[$m]+="$(run_mode "$m")"$'\n'; done
done
printf '# %s %s cpus, sockperf TCP ping-pong %dB on loopback through a relay (GOMAXPROCS %d, sysmon tick %s), %ss x %d runs (alternating); latency usec (half round trip)\n' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$MSG" "$PROCS" "$SYSMON" "$DUR" "$REPS"
printf '%-8s %9s %9s %9s %16s  %s\n' mode avg p50 p99 "relay cpu_us/rt" "runs (avg, cpu_us/rt)"
for m in poller loop; do
    ok=$(printf '%s' "${RES[$m]}" | grep -E '^[0-9.]+ [0-9.]+ [0-9.]+ [0-9.]+$')
    if [ -z "$ok" ]; then printf '%-8s %9s\n' "$m" fail; tail -3 "$WORK/$m.log" >&2; continue; fi
    line=$(echo "$ok" | sort -g | awk '{a[NR]=$0} END{print a[int((NR+1)/2)]}')
    cpu=$(echo "$ok" | awk '{print $4}' | sort -g | awk '{a[NR]=$0} END{print a[int((NR+1)/2)]}')
    runs=$(printf '%s' "${RES[$m]}" | awk '{printf "%s%s", (NR>1?" ":""), ($4=="" || $4=="fail" ? "fail" : sprintf("%s,%.1f", $1, $4))}')
    set -- $line
    printf '%-8s %9s %9s %9s %16.1f  %s\n' "$m" "$1" "$2" "$3" "$cpu" "$runs"
    MED[$m]="$1 $cpu"
done
if [ -n "${MED[poller]:-}" ] && [ -n "${MED[loop]:-}" ]; then
    set -- ${MED[poller]} ${MED[loop]}
    printf '# loop / poller: latency %.2fx, relay CPU per round trip %.2fx\n' "$(echo "$3 / $1" | bc -l)" "$(echo "$4 / $2" | bc -l)"
fi
