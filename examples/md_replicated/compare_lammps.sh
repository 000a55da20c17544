#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Time per step of md_replicated (1 rank) against Debian's LAMMPS on the same in.lj, run in
# alternation so both see the same machine load; prints each pair and the median ratio.
#   bash examples/md_replicated/compare_lammps.sh [build-dir] [pairs]
# Needs `lmp` (apt-get install lammps): a measuring tool here, never a dependency of commx.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build/release}
pairs=${2:-5}
md=$build/examples/md_replicated/md_replicated_inproc
lmp=$(command -v lmp || command -v lmp_serial || true)
[[ -x $md ]] || { echo "compare_lammps: build $md first (cmake --preset release)" >&2; exit 1; }
[[ -n $lmp ]] || { echo "compare_lammps: no lmp; apt-get install lammps" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ratios=()
for ((k = 1; k <= pairs; ++k)); do
  (cd "$work" && "$lmp" -in "$here/reference/in.lj" -log log.lammps -screen none)
  lammps_ms=$(awk '/^Loop time/ {print $4 * 1000 / $9}' "$work/log.lammps")
  md_ms=$(COMMX_INPROC_RANKS=1 "$md" --collectives flat | sed -n 's/.*time_per_step_ms=\([0-9.e+-]*\).*/\1/p')
  ratio=$(awk -v a="$md_ms" -v b="$lammps_ms" 'BEGIN {printf "%.3f", a / b}')
  ratios+=("$ratio")
  echo "pair $k: lammps $lammps_ms ms/step, md_replicated $md_ms ms/step, ratio $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{r[NR] = $1} END {print "median ratio md/lammps:", r[int((NR + 1) / 2)]}'
