#!/usr/bin/env bash
# soak.sh: runs `ustack serve` on AF_PACKET over a veth pair, under mixed
# load from the kernel's side (HTTP downloads, a churn of short HTTP
# connections, UDP echoes, a ping flood), for DURATION seconds (600), and
# records the server's resident memory, goroutines and open descriptors
# every second into OUT (soak.csv), then prints start, end and max of each.
# Needs root, iproute2, curl and iputils-ping. Not part of CI.
set -euo pipefail

DURATION=${DURATION:-600}
OUT=${OUT:-soak.csv}
QDISC=${QDISC:-busylock}
BUSYPOLL=${BUSYPOLL:-off}
K=ustack-soak-k U=ustack-soak-u
KADDR=198.18.80.1 UADDR=198.18.80.2

cd "$(dirname "$0")/.."
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	ip netns del "$K" 2>/dev/null || true
	ip netns del "$U" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/ustack" ./cmd/ustack
ip netns add "$K"
ip netns add "$U"
ip link add soak0 netns "$K" type veth peer name soak1 netns "$U"
ip -n "$K" addr add "$KADDR/24" dev soak0
for ns in "$K" "$U"; do ip -n "$ns" link set lo up; done
ip -n "$K" link set soak0 up
ip -n "$U" link set soak1 up

ip netns exec "$U" "$work/ustack" serve -link afpacket:soak1 -addr "$UADDR/24" \
	-qdisc "$QDISC" -busypoll "$BUSYPOLL" -metrics 127.0.0.1:9464 2>"$work/serve.log" &
server=$!
pids+=("$server")
for _ in $(seq 50); do
	ip netns exec "$U" curl -sf -o /dev/null http://127.0.0.1:9464/metrics && break
	sleep 0.1
done
ip netns exec "$K" ping -c 3 -i 0.2 -W 2 "$UADDR" >/dev/null

load() { ip netns exec "$K" bash -c "$1" >/dev/null 2>&1 & pids+=($!); }
load "while :; do curl -sf -o /dev/null http://$UADDR/bytes/50000000; done"
load "while :; do curl -sf -o /dev/null http://$UADDR/bytes/50000000; done"
load "while :; do curl -sf -o /dev/null http://$UADDR/bytes/1000; done"
load "while :; do for i in \$(seq 100); do echo soak\$i >/dev/udp/$UADDR/7; done; sleep 0.01; done"
load "ping -f -q $UADDR"

echo "second,rss_kib,goroutines,fds" >"$OUT"
for s in $(seq "$DURATION"); do
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$server/status")
	fds=$(ls "/proc/$server/fd" | wc -l)
	gor=$(ip netns exec "$U" curl -sf http://127.0.0.1:9464/metrics | awk '$1 == "go_goroutines" {print $2}')
	echo "$s,$rss,$gor,$fds" >>"$OUT"
	sleep 1
done

kill -INT "$server"
wait "$server" || { echo "ustack serve exited with an error:"; cat "$work/serve.log"; exit 1; }
awk -F, 'NR > 1 {
	for (i = 2; i <= 4; i++) { if (NR == 2) first[i] = $i; last[i] = $i; if ($i > max[i]) max[i] = $i }
} END {
	split("rss_kib goroutines fds", name, " ")
	for (i = 2; i <= 4; i++) printf "%-11s start %8d  end %8d  max %8d\n", name[i-1], first[i], last[i], max[i]
}' "$OUT"
