#!/usr/bin/env bash
# Two ranks on one machine joined by a capped network link instead of shared memory: rank 1
# runs in the network namespace "qsync1", connected to the root namespace by a veth pair with
# private addresses (10.213.0.1 and .2/24, routed nowhere else), both ends rate-limited by tc
# (token bucket). MPI then talks TCP over that link only (no shared-memory transport), and
# PMIx's server listens on it so that the namespaced rank can reach its launcher. Needs root.
#
#   scripts/capped-link.sh up RATE      e.g. 1gbit, 200mbit (tc units)
#   scripts/capped-link.sh run ARGS...  mpirun -np 2 over the link: rank 0 `qsync ARGS`, rank 1
#                                       the same inside the namespace (QSYNC=path, default build/qsync)
#   scripts/capped-link.sh down
set -euo pipefail
NS=qsync1
HOST_IF=qs-veth0
NS_IF=qs-veth1
NET=10.213.0
QSYNC=${QSYNC:-build/qsync}

case "${1:-}" in
up)
    rate=${2:?usage: capped-link.sh up RATE (e.g. 1gbit)}
    ip netns add "$NS"
    ip link add "$HOST_IF" type veth peer name "$NS_IF"
    ip link set "$NS_IF" netns "$NS"
    ip addr add "$NET.1/24" dev "$HOST_IF"
    ip link set "$HOST_IF" up
    ip netns exec "$NS" ip addr add "$NET.2/24" dev "$NS_IF"
    ip netns exec "$NS" ip link set "$NS_IF" up
    ip netns exec "$NS" ip link set lo up
    tc qdisc add dev "$HOST_IF" root tbf rate "$rate" burst 256kb latency 50ms
    ip netns exec "$NS" tc qdisc add dev "$NS_IF" root tbf rate "$rate" burst 256kb latency 50ms
    echo "capped link up: $NET.1 <-> $NET.2 ($NS), $rate each way"
    ;;
run)
    shift
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export PMIX_MCA_ptl_tcp_remote_connections=1 PMIX_MCA_ptl_tcp_if_include="$NET.0/24"
    exec mpirun --mca btl tcp,self --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
        -np 1 "$QSYNC" "$@" : -np 1 ip netns exec "$NS" "$QSYNC" "$@"
    ;;
down)
    ip link del "$HOST_IF" 2>/dev/null || true
    ip netns del "$NS" 2>/dev/null || true
    ;;
*)
    sed -n '2,14p' "$0" >&2
    exit 2
    ;;
esac
