#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# One job of two sites, each site started by its own mpirun (Open MPI as the launcher only), as
# on two clusters: 2 ranks at site A (job ranks 0-1) and 2 at site B (2-3), which find each
# other through commx's bootstrap (COMMX_ROOT, COMMX_RANK_BASE, COMMX_JOB_SIZE).
#   sites_by_launch.sh <mpirun> <program> [args...]
# Exits 0 when every rank of both launches did. Each launch is bounded by timeout(1).
set -euo pipefail
mpirun=$1
shift
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
launch() {  # site, first rank
  timeout -s KILL 200 "$mpirun" -np 2 --oversubscribe --bind-to none \
    -x "COMMX_ROOT=127.0.0.1:$port" -x "COMMX_TOKEN=$token" -x COMMX_JOB_SIZE=4 \
    -x COMMX_TIMEOUT=60 -x "COMMX_SITE=$1" -x "COMMX_RANK_BASE=$2" "${@:3}"
}
launch A 0 "$@" &
a=$!
launch B 2 "$@" &
b=$!
status=0
wait "$a" || status=$?
wait "$b" || status=$?
exit "$status"
