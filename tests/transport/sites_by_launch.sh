#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One job of two sites, each site started by its own mpirun (Open MPI), as on two clusters: N/2
# ranks at site A (job ranks 0..N/2-1) and N/2 at site B, which find each other through
# commx's bootstrap (COMMX_ROOT, COMMX_RANK_BASE, COMMX_JOB_SIZE). The program may be an MPI
# program (mpi+wan: each launch is one site's MPI job) or not (mpirun as a launcher only).
#   sites_by_launch.sh <mpirun> <N> <program> [args...]
# Exits 0 when every rank of both launches did. Each launch is bounded by timeout(1).
# COMMX_TEST_SPLIT_SITE=1 starts site A's ranks as two launches instead (a mistake mpi+wan must
# refuse: a site's ranks must be one MPI job).
set -euo pipefail
mpirun=$1
ranks=$2
shift 2
if ((ranks < 2 || ranks % 2 != 0)); then
  echo "sites_by_launch.sh: N must be even and at least 2, not $ranks" >&2
  exit 2
fi
per_site=$((ranks / 2))
# The root's port: free now, and below the kernel's ephemeral range, so that no connection a
# test running beside this one makes takes it before rank 0 listens (a port the kernel handed
# out with bind(0) was, once: "Address already in use").
port=$(python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(200):
    candidate = random.randrange(10000, min(low, 32768))
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", candidate))
        except OSError:
            continue
    print(candidate)
    break
else:
    raise SystemExit("sites_by_launch.sh: no free port below the ephemeral range")
PY
)
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# An MPI program: this machine's shared memory only (no network probing, no single copy, which
# containers may refuse), ranks that yield while MPI waits (the two sites share the cores).
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_mpi_yield_when_idle=1
# A session directory per launch: two mpiruns starting at once race to create Open MPI's
# shared one (/tmp/ompi.<host>.<uid>), and the loser fails in orte_init ("File exists").
sessions=$(mktemp -d)
trap 'rm -rf "$sessions"' EXIT
launch() {  # site, first rank
  mkdir -p "$sessions/$2"
  timeout -s KILL 200 "$mpirun" -np "$per_site" --oversubscribe --bind-to none \
    --mca orte_tmpdir_base "$sessions/$2" \
    -x "COMMX_ROOT=127.0.0.1:$port" -x "COMMX_TOKEN=$token" -x "COMMX_JOB_SIZE=$ranks" \
    -x COMMX_TIMEOUT=60 -x "COMMX_SITE=$1" -x "COMMX_RANK_BASE=$2" "${@:3}"
}
pids=()
if [[ ${COMMX_TEST_SPLIT_SITE:-0} == 1 && $per_site -ge 2 ]]; then
  half=$((per_site / 2))
  per_site=$half launch A 0 "$@" &
  pids+=($!)
  per_site=$((ranks / 2 - half)) launch A "$half" "$@" &
  pids+=($!)
else
  launch A 0 "$@" &
  pids+=($!)
fi
per_site=$((ranks / 2)) launch B "$((ranks / 2))" "$@" &
pids+=($!)
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=$?
done
exit "$status"
