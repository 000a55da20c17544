#!/bin/bash
# SPDX-License-Identifier: MIT
# simgrid_determinism.sh PROGRAM RANKS: runs the simulated job twice with compute skipped
# (COMMX_SIMGRID_COMPUTE=skip) and fails unless both print the same simulated times and results,
# and those times are positive (a stack that took no simulated time would repeat itself too).
set -euo pipefail
program=$1
ranks=$2
first=$(COMMX_SIMGRID_COMPUTE=skip COMMX_SIMGRID_RANKS=$ranks timeout 300 "$program")
second=$(COMMX_SIMGRID_COMPUTE=skip COMMX_SIMGRID_RANKS=$ranks timeout 300 "$program")
echo "first:  $first"
echo "second: $second"
if [[ "$first" != "$second" ]]; then
  echo "simgrid_determinism: two runs of one simulated job differ" >&2
  exit 1
fi
if ! [[ "$first" =~ ^ranks=$ranks\ allreduce_s=0\.[0-9]*[1-9] ]]; then
  echo "simgrid_determinism: no positive simulated allreduce time for $ranks ranks" >&2
  exit 1
fi
