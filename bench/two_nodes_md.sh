#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# MD (LAMMPS's in.lj, 32000 atoms) time per step on two nodes of two ranks, where each node is a
# network namespace with a host name of its own and the two are joined by a veth bridge, so
# that Open MPI too sees two nodes: vader between the ranks of a node, tcp between the nodes
# (`--mca btl self,vader,tcp`), the layout the layered stack shm+tcp is built for. One machine
# cannot hold two real nodes; this is the nearest it comes: the nodes share the cores and the
# memory bus, but nothing at the MPI or commx level is shared between them.
#
# Every run starts under mpirun (Open MPI's rsh launcher, its "ssh" replaced by `ip netns exec`
# into the node's namespace), commx's stacks with mpirun as their launcher only:
#   shm+tcp, shm+tcp/hier   transport::shm_tcp, coll::flat and coll::hierarchical
#   tcp, tcp/hier           transport::tcp alone (loopback within a node, the bridge between)
#   ompi, ompi/native       Open MPI over vader+tcp, coll::flat and Open MPI's own collectives
#   shm-1node(/hier) (bound), ompi-1node   all four ranks on one node: no network at all
# Interleaved rounds, the order rotating; prints each run's median time per step and its ratio
# to shm+tcp, and the load average before and after.
#   sudo bash bench/two_nodes_md.sh [build dir] [rounds] [steps]
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/md_rounds.sh
source bench/md_rounds.sh
md_arguments "$@"
for program in "${md}_shm_tcp" "${md}_mpi"; do
  [[ -x $program ]] || { echo "two_nodes_md: build the release preset first ($program)" >&2; exit 2; }
done
[[ $(id -u) == 0 ]] || { echo "two_nodes_md: needs root (network namespaces)" >&2; exit 2; }

tag=cmx$$
work=$(mktemp -d)
nodes=("${tag}n0" "${tag}n1")
cleanup() {
  for node in "${nodes[@]}"; do ip netns del "$node" 2>/dev/null || true; done
  ip link del "${tag}br" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
ip link add "${tag}br" type bridge
ip addr add 10.78.0.1/24 dev "${tag}br"
ip link set "${tag}br" up
for i in 0 1; do
  node=${nodes[$i]}
  ip netns add "$node"
  ip link add "${node}o" type veth peer name "${node}i"
  ip link set "${node}i" netns "$node"
  ip link set "${node}o" master "${tag}br" up
  ip netns exec "$node" ip addr add "10.78.0.$((i + 2))/24" dev "${node}i"
  ip netns exec "$node" ip link set "${node}i" up
  ip netns exec "$node" ip link set lo up
done

# Open MPI's remote shell: "<agent> <host> <command...>" runs the command on that host.
cat > "$work/node_shell" <<'EOF'
#!/usr/bin/env bash
host=$1
shift
exec ip netns exec "$host" unshare --uts bash -c "hostname $host; $*"
EOF
chmod +x "$work/node_shell"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
launch=(mpirun -np 4 --oversubscribe --bind-to none --mca plm_rsh_agent "$work/node_shell"
        --mca oob_tcp_if_include 10.78.0.0/24 --mca btl_tcp_if_include 10.78.0.0/24
        --mca mpi_yield_when_idle 1)
two=(--host "${nodes[0]}:2,${nodes[1]}:2")
one=(--host "${nodes[0]}:4")
commx_env() {  # the rendezvous at rank 0, on the first node
  echo -x "COMMX_ROOT=10.78.0.2:$((20000 + RANDOM % 20000))" -x "COMMX_TOKEN=$token" -x COMMX_TIMEOUT=120
}
# COMMX_* variables set for this script reach commx's ranks too (COMMX_TCP_POLL=...).
for var in $(compgen -e | grep '^COMMX_' || true); do launch+=(-x "$var"); done
declare -A cmd
cmd[shm+tcp]="${two[*]} \$(commx_env) ${md}_shm_tcp --collectives flat"
cmd[shm+tcp/hier]="${two[*]} \$(commx_env) ${md}_shm_tcp --collectives hierarchical"
cmd[tcp]="${two[*]} \$(commx_env) ${md}_tcp --collectives flat"
cmd[tcp/hier]="${two[*]} \$(commx_env) ${md}_tcp --collectives hierarchical"
cmd[ompi]="${two[*]} --mca btl self,vader,tcp ${md}_mpi --collectives flat"
cmd[ompi/native]="${two[*]} --mca btl self,vader,tcp ${md}_mpi --collectives native"
cmd[shm-1node]="${one[*]} \$(commx_env) ${md}_shm --collectives flat"
cmd[shm-1node/hier]="${one[*]} \$(commx_env) ${md}_shm --collectives hierarchical"
cmd[ompi-1node]="${one[*]} --mca btl self,vader ${md}_mpi --collectives flat"
# TWO_NODES_RUNS="shm+tcp ompi": only these runs.
read -r -a names <<< "${TWO_NODES_RUNS:-shm+tcp shm+tcp/hier tcp tcp/hier ompi ompi/native shm-1node shm-1node/hier ompi-1node}"
args=(--atoms-cells 20 --steps "$steps")

run_one() { eval "timeout 600 ${launch[*]} ${cmd[$1]} ${args[*]}"; }
against_shm_tcp() { echo shm+tcp; }
md_rounds "$rounds"
md_table against_shm_tcp
