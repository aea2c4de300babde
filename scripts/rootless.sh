#!/bin/bash
# rootless.sh - ustack as the network of rootless containers, against the
# programs it stands in for, in one run: the targets of issue 26.
#
#   podman       a 256 MiB download inside a rootless Podman container
#                (the same Podman and image), ustack as its slirp4netns
#                (--network-cmd-path) against slirp4netns
#   pasta        the same download in a bare namespace served with
#                Podman 5's pasta arguments, ustack's pasta against pasta
#   ready        start to the ready byte, with Podman's arguments for its
#                rootless network namespace, ustack against slirp4netns
#   rootlesskit  the download in RootlessKit's child, ustack as its
#                slirp4netns against slirp4netns
#
# The configurations alternate (A B A B ...) REPS times and each cell is
# the median of its runs, so that the ratios come from one run of one
# machine; the download is timed inside the namespace (busybox time), the
# ready byte from before the fork to its arrival. Everything runs in a
# network namespace the script makes (the tools' "host": a veth end with
# 198.18.9.1/24 and default routes, which pasta copies), the file served
# from its loopback (reached through each sandbox's gateway, which leads
# there); no traffic leaves it.
#
# Needs root, and the user RUNAS with subordinate id ranges for the
# rootless runs (useradd -M -s /bin/sh ustack-podman; Debian's useradd
# adds the ranges), podman, runc, rootlesskit, slirp4netns, pasta (passt),
# busybox-static, uidmap and util-linux; a built ustack (USTACK, default:
# go build into the work directory). It installs nothing; everything it
# creates (namespaces, processes, Podman's storage, the work directory)
# is removed on exit.
#
# Env: REPS [3], SIZE [256] MiB, PORT [18080], RUNAS [ustack-podman],
#      USTACK [built here], KEEP=1 keeps the work directory.
set -u
export LC_ALL=C
REPS=${REPS:-3} SIZE=${SIZE:-256} PORT=${PORT:-18080} RUNAS=${RUNAS:-ustack-podman}
[ "$(id -u)" = 0 ] || { echo "rootless.sh: must run as root (the rootless runs switch to RUNAS themselves)" >&2; exit 1; }
# In a mount namespace of its own, private: slirp4netns 1.2's sandbox,
# started outside one (Podman starts it in one), detaches mounts of its
# caller's namespace, /run/netns's among them.
if [ -z "${ROOTLESS_SH_NS:-}" ]; then
    command -v unshare >/dev/null || { echo "rootless.sh: missing unshare (apt-get install util-linux)" >&2; exit 1; }
    ROOTLESS_SH_NS=1 exec unshare --mount --propagation private "$0" "$@"
fi
for t in podman runc rootlesskit slirp4netns pasta busybox nsenter runuser newuidmap ip; do
    command -v "$t" >/dev/null || { echo "rootless.sh: missing $t (apt-get install podman runc rootlesskit slirp4netns passt busybox-static uidmap util-linux iproute2)" >&2; exit 1; }
done
RUID=$(id -u "$RUNAS" 2>/dev/null) || { echo "rootless.sh: no user $RUNAS: useradd -M -s /bin/sh $RUNAS, or set RUNAS" >&2; exit 1; }
grep -q "^$RUNAS:" /etc/subuid || { echo "rootless.sh: $RUNAS has no subordinate uids: usermod --add-subuids 300000-365535 --add-subgids 300000-365535 $RUNAS" >&2; exit 1; }
SLIRP=$(command -v slirp4netns) PASTA=$(command -v pasta)
# Short: Podman's API socket paths under the runtime directory must fit
# in a unix socket's 107 bytes.
WORK=$(mktemp -d /tmp/rl.XXXXXX)
HOSTNS=rootless-$$
PIDS=()
# as CMD... runs CMD as RUNAS in the host namespace, in its environment.
as() {
    nsenter --net="/run/netns/$HOSTNS" -- runuser -u "$RUNAS" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        HOME="$WORK/home" XDG_RUNTIME_DIR="$WORK/run" "$@"
}
cleanup() {
    local p
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    if [ -d "$WORK/home" ]; then
        as podman rm --all --force --time 0 >/dev/null 2>&1
        # Podman's pause process, the user namespace's holder.
        [ -f "$WORK/run/libpod/tmp/pause.pid" ] && kill -9 "$(cat "$WORK/run/libpod/tmp/pause.pid")" 2>/dev/null
    fi
    for p in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^rl-$$-"); do ip netns del "$p"; done
    ip netns del "$HOSTNS" 2>/dev/null
    [ -n "${KEEP:-}" ] && echo "rootless.sh: kept $WORK" >&2 || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -z "${USTACK:-}" ]; then
    USTACK=$WORK/ustack.build
    (cd "$(dirname "$0")/.." && go build -o "$USTACK" ./cmd/ustack) || exit 1
fi
mkdir -p "$WORK/bin" "$WORK/home" "$WORK/run" "$WORK/www" "$WORK/rootfs/bin" || exit 1
cp "$USTACK" "$WORK/bin/ustack" && ln -s ustack "$WORK/bin/slirp4netns" && ln -s ustack "$WORK/bin/pasta"
USLIRP=$WORK/bin/slirp4netns UPASTA=$WORK/bin/pasta
dd if=/dev/zero of="$WORK/www/blob" bs=1M count="$SIZE" status=none
# The image: busybox-static and its applets, imported offline.
cp "$(command -v busybox)" "$WORK/rootfs/bin/busybox"
for a in sh wget time; do ln -s busybox "$WORK/rootfs/bin/$a"; done
tar -C "$WORK/rootfs" -cf "$WORK/image.tar" . || exit 1
mkdir -p "$WORK/home/.config/containers"
printf '[engine]\nruntime = "runc"\ncgroup_manager = "cgroupfs"\nevents_logger = "file"\n' >"$WORK/home/.config/containers/containers.conf"
printf '[storage]\ndriver = "vfs"\n' >"$WORK/home/.config/containers/storage.conf"
chmod 0755 "$WORK" "$WORK/bin" && chmod 0700 "$WORK/run" && chown -R "$RUID:$(id -g "$RUNAS")" "$WORK"

# The host namespace.
ip netns add "$HOSTNS" || exit 1
H="ip netns exec $HOSTNS"
$H ip link set lo up
$H ip link add eth0 type veth peer name eth0peer && $H ip link set eth0 up && $H ip link set eth0peer up
$H ip addr add 198.18.9.1/24 dev eth0 && $H ip route add default via 198.18.9.254 || exit 1
$H busybox httpd -f -p "127.0.0.1:$PORT" -h "$WORK/www" &
PIDS+=($!)

as podman import "$WORK/image.tar" localhost/rootless-busybox >/dev/null 2>&1 || { echo "rootless.sh: podman import failed" >&2; exit 1; }
URL=http://10.0.2.2:$PORT/blob

# secs: the seconds busybox time printed (among the wrapper's warnings),
# or "fail" if the command failed (time says so, or wget did).
secs() {
    awk '/^[0-9]+\.[0-9]+$/{t=$0} /non-zero|wget:/{bad=1} END{print (bad || t == "") ? "fail" : t}'
}
# Each run prints seconds, or "fail".
podman_run() { # SLIRP4NETNS
    as podman --network-cmd-path="$1" run --rm --network slirp4netns:allow_host_loopback=true localhost/rootless-busybox \
        time -f %e wget -q -O /dev/null "$URL" 2>&1 | secs
}
pasta_run() { # PASTA [EXTRA...]
    local ns=rl-$$-$RANDOM p=$1
    shift
    ip netns add "$ns" || { echo fail; return; }
    # Podman 5's arguments, but --no-map-gw (the gateway is the way to
    # the host's loopback here) and --dns-forward (no DNS is asked).
    $H "$p" "$@" --config-net -t none -u none -T none -U none --quiet --netns "/run/netns/$ns" >"$WORK/pasta.log" 2>&1 || { echo fail; ip netns del "$ns"; return; }
    ip netns exec "$ns" busybox time -f %e busybox wget -q -O /dev/null "http://198.18.9.254:$PORT/blob" 2>&1 | secs
    ip netns del "$ns" # pasta exits with it
}
ready_run() { # SLIRP4NETNS
    local ns=rl-$$-$RANDOM
    ip netns add "$ns" || { echo fail; return; }
    rm -f "$WORK/ready" && mkfifo "$WORK/ready"
    # In a mount namespace of its own, as Podman starts it (slirp4netns's
    # sandbox detaches its caller's mounts otherwise), made before the
    # clock starts.
    unshare --mount --propagation private bash -c '
        t0=$(date +%s%N)
        "$1" --disable-host-loopback --mtu=65520 --enable-sandbox --enable-seccomp --enable-ipv6 -c -r 3 \
            --netns-type=path "$2" tap0 3>"$3" >/dev/null 2>&1 &
        if head -c 1 "$3" >/dev/null; then
            t1=$(date +%s%N)
            awk -v d=$((t1 - t0)) "BEGIN{printf \"%.4f\\n\", d / 1e9}"
        else
            echo fail
        fi
        kill $! 2>/dev/null; wait $! 2>/dev/null' - "$1" "/run/netns/$ns" "$WORK/ready"
    ip netns del "$ns"
}
rootlesskit_run() { # SLIRP4NETNS
    as rootlesskit --state-dir="$WORK/run/rk" --net=slirp4netns --slirp4netns-binary="$1" --port-driver=none \
        busybox time -f %e busybox wget -q -O /dev/null "$URL" 2>&1 | secs
}
median() { # median of the numeric arguments, or "fail"
    printf '%s\n' "$@" | grep -E '^[0-9.]+$' | sort -g |
        awk '{a[NR]=$1} END{if(!NR){print "fail"; exit} printf "%.3f", (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'
}
declare -A T
for r in $(seq "$REPS"); do
    T[podman.u]+="$(podman_run "$USLIRP") "; T[podman.o]+="$(podman_run "$SLIRP") "
    # The installed pasta, as root, switches to nobody before it opens
    # the (root's) namespace, and fails, unless it stays root, as
    # Podman's pasta is root of Podman's user namespace.
    T[pasta.u]+="$(pasta_run "$UPASTA") "; T[pasta.o]+="$(pasta_run "$PASTA" --runas 0) "
    T[ready.u]+="$(ready_run "$USLIRP") "; T[ready.o]+="$(ready_run "$SLIRP") "
    T[rootlesskit.u]+="$(rootlesskit_run "$USLIRP") "; T[rootlesskit.o]+="$(rootlesskit_run "$SLIRP") "
done
# shellcheck disable=SC2086
ratio() { # MEASURE DIRECTION: the ratio the target compares, ustack's way
    local u o
    u=$(median ${T[$1.u]}) o=$(median ${T[$1.o]})
    awk -v u="$u" -v o="$o" -v d="$2" 'BEGIN{ if (u+0 <= 0 || o+0 <= 0) { print "-"; exit }
        printf "%.2fx", (d == "faster" ? o / u : u / o) }'
}
printf '# %s, %s cpus, %s MiB downloads, %d runs each (alternating); seconds, median, and each run\n' \
    "$(date -u +%FT%TZ)" "$(nproc)" "$SIZE" "$REPS"
printf '# ustack %s; %s; %s; %s\n' "$("$USTACK" slirp4netns --version | head -1)" "$("$SLIRP" --version | head -1)" \
    "$("$PASTA" --version 2>/dev/null | head -1)" "$(podman --version)"
printf '%-52s %8s %8s %8s %-8s  %s\n' measure ustack other ratio target "runs ustack | other"
row() { # KEY LABEL DIRECTION TARGET
    # shellcheck disable=SC2086
    printf '%-52s %8s %8s %8s %-8s  %s | %s\n' "$2" "$(median ${T[$1.u]})" "$(median ${T[$1.o]})" "$(ratio "$1" "$3")" "$4" \
        "$(echo ${T[$1.u]} | tr ' ' /)" "$(echo ${T[$1.o]} | tr ' ' /)"
}
row podman "$SIZE MiB in a Podman container: ustack / slirp4netns" faster ">= 1.5x"
row pasta "$SIZE MiB, Podman's pasta arguments: ustack / pasta" faster ">= 1.0x"
row ready "start to ready byte: ustack / slirp4netns" slower "<= 1.0x"
row rootlesskit "$SIZE MiB under RootlessKit: ustack / slirp4netns" faster ">= 1.5x"
echo "# ratios: the download's time, other / ustack (above 1: ustack is faster); the ready byte's, ustack / other (below 1: ustack is sooner)"
cat <<EOF
# commands (in the host namespace but the ready byte's; podman and rootlesskit as $RUNAS, HOME and XDG_RUNTIME_DIR in the work directory;
# SLIRP4NETNS is $SLIRP or ustack linked as slirp4netns, PASTA is $PASTA or ustack linked as pasta):
#   podman --network-cmd-path=SLIRP4NETNS run --rm --network slirp4netns:allow_host_loopback=true IMAGE time -f %e wget -q -O /dev/null $URL
#   PASTA --config-net -t none -u none -T none -U none --quiet --netns /run/netns/NS   (pasta: --runas 0 first);
#     ip netns exec NS busybox time -f %e busybox wget -q -O /dev/null http://198.18.9.254:$PORT/blob
#   SLIRP4NETNS --disable-host-loopback --mtu=65520 --enable-sandbox --enable-seccomp --enable-ipv6 -c -r 3 --netns-type=path /run/netns/NS tap0
#   rootlesskit --net=slirp4netns --slirp4netns-binary=SLIRP4NETNS --port-driver=none busybox time -f %e busybox wget -q -O /dev/null $URL
EOF
