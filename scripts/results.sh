#!/bin/bash
# results.sh - regenerate the measured blocks of docs/results.md from the
# code as it is. Each block sits between the lines
#     <!-- results:NAME -->  and  <!-- /results:NAME -->
# and is replaced by the commands that make it, each followed by what it
# printed, under a line naming the date, commit, machine and Go version.
# The prose around the blocks is not touched: reread it after a run.
#
# Usage: scripts/results.sh [-n] NAME...   (or: all; -l lists the blocks)
#   -n  print the new blocks instead of writing docs/results.md
# Blocks marked (root) need root, and the peers a few Debian packages
# (iperf3 jq sockperf slirp4netns passt; rootless and wg name theirs); a block that cannot run is
# refused before anything is measured. A failing command fails the script
# and leaves the file as it was.
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."
DOC=docs/results.md

# The blocks: name, whether it needs root, and its commands (one per line).
declare -A CMDS ROOT
add() { ROOT[$1]=$2; CMDS[$1]=$3; }
add quickstart no 'go run ./cmd/ustack bench'
add qdisc no "go test -run '^\$' -bench WritePacket -benchtime 2s ./sched"
add devices yes "go run ./cmd/ustack bench -link kveth,veth,tun -test tcp_stream,tcp_rr -senders 1 -qdisc none -count 3
go run ./cmd/ustack bench -link kveth,veth,tun -test tcp_stream,tcp_rr -senders 1 -qdisc none -count 3 -reverse
go run ./cmd/ustack bench -link kveth,veth,tun -test tcp_stream -senders 1 -qdisc none,fifo -count 3 -offload=false
go run ./cmd/ustack bench -link kveth,veth,tun -test tcp_stream -senders 1 -qdisc none,fifo -count 3 -offload=false -reverse
go run ./cmd/ustack bench -link veth -test udp_stream -senders 64 -count 3"
add sandbox yes "scripts/peers.sh
scripts/tun-rr.sh"
add pollcost no "scripts/pollcost.sh
SYSMON=default scripts/pollcost.sh"
add busypoll no "go run ./cmd/ustack bench -test tcp_rr,udp_rr -qdisc none -senders 1,16,64 -busypoll off,on:50,spin:50,adaptive -count 3"
add busypoll-veth yes "go run ./cmd/ustack bench -link veth -test tcp_rr,udp_rr -qdisc none -senders 1,16,64 -busypoll off,on:50,spin:50,adaptive -count 3"
add cache no "go run ./cmd/ustack bench -test tcp_rr,udp_stream -cache off,on -count 3
go run ./cmd/ustack bench -test tcp_rr -senders 1000 -qdisc none,llist -cache off,on -count 5"
add cache-veth yes "go run ./cmd/ustack bench -link veth -test tcp_rr,udp_stream -cache off,on -count 3"
add rootless yes "scripts/rootless.sh"
add wg yes "scripts/wg.sh"
ORDER="quickstart qdisc devices sandbox pollcost busypoll busypoll-veth cache cache-veth rootless wg"

dry=
case ${1:-} in
    -l) for n in $ORDER; do printf '%-14s root:%-3s %s\n' "$n" "${ROOT[$n]}" "$(echo "${CMDS[$n]}" | head -1)"; done; exit 0 ;;
    -n) dry=1; shift ;;
esac
[ $# -gt 0 ] || { echo "usage: scripts/results.sh [-n] NAME... | all   (-l lists them)" >&2; exit 2; }
names=("$@")
[ "$*" = all ] && names=($ORDER)
for n in "${names[@]}"; do
    [ -n "${CMDS[$n]:-}" ] || { echo "results.sh: no block $n; blocks: $ORDER" >&2; exit 2; }
    grep -qx "<!-- results:$n -->" "$DOC" || { echo "results.sh: $DOC has no <!-- results:$n --> marker" >&2; exit 2; }
    if [ "${ROOT[$n]}" = yes ] && [ "$(id -u)" != 0 ]; then
        echo "results.sh: block $n needs root (network namespaces, veth, TUN)" >&2; exit 2
    fi
done

cpu=$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)
stamp="$(date -u +%F), commit $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . ':!docs' || echo '+changes'), $(nproc) cpus ($cpu), $(free -g | awk '/^Mem:/{print $2}') GiB, Linux $(uname -r), $(go env GOVERSION)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for n in "${names[@]}"; do
    out=$tmp/$n
    { echo "<!-- results:$n -->"; echo "$stamp:"; echo; echo '```'; } >"$out"
    while IFS= read -r cmd; do
        echo "results.sh: $n: $cmd" >&2
        echo "\$ $cmd" >>"$out"
        bash -c "$cmd" >>"$out" 2>"$tmp/err" || { cat "$tmp/err" >&2; echo "results.sh: $n: '$cmd' failed; $DOC unchanged" >&2; exit 1; }
        echo >>"$out"
    done <<<"${CMDS[$n]}"
    sed -i '$ d' "$out" # the blank line after the last command
    { echo '```'; echo "<!-- /results:$n -->"; } >>"$out"
done
if [ -n "$dry" ]; then
    for n in "${names[@]}"; do cat "$tmp/$n"; echo; done
    exit 0
fi
for n in "${names[@]}"; do
    # Replace the lines from the opening marker to the closing one.
    awk -v opening="<!-- results:$n -->" -v closing="<!-- /results:$n -->" -v file="$tmp/$n" '
        $0 == opening { while ((getline l < file) > 0) print l; skip = 1; next }
        $0 == closing { skip = 0; next }
        !skip' "$DOC" >"$tmp/doc"
    cp "$tmp/doc" "$DOC"
done
echo "results.sh: wrote ${names[*]} into $DOC; reread the prose around them" >&2
