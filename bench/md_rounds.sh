# shellcheck shell=bash
# SPDX-License-Identifier: MIT
# Sourced by the MD bench scripts (layered_md.sh, two_nodes_md.sh, sites_md.sh): interleaved
# rounds of whole runs, each run's time per step (md_replicated's time_per_step_ms), medians.
#
# The caller sources it from the source tree's top, calls `md_arguments "$@"`, fills `names`
# (the runs, in order) and defines `run_one <name>`, which runs that one and prints its output;
# then:
#   md_rounds <rounds>        every run once a round, the order rotating; times in `times`
#   md_table <reference-fn>   a line per run: median ms/step, its ratio to the median of the
#                             run `<reference-fn> <name>` names, and every round's figure; with
#                             MD_CSV=FILE also as CSV (run, ms_per_step, ratio, reference), as
#                             bench/current_figures.py collects it

declare -A times

# The scripts' common arguments, [build dir] [rounds] [steps]: sets build (absolute), rounds,
# steps and md (the md_replicated programs' common prefix).
# shellcheck disable=SC2034  # the caller's variables
md_arguments() {
  build=$(realpath "${1:-build/release}")
  rounds=${2:-5}
  steps=${3:-100}
  md=$build/examples/md_replicated/md_replicated
}
# shellcheck disable=SC2154  # `names` and `run_one` are the caller's

md_rounds() {
  local rounds=$1 r k n name t
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  n=${#names[@]}
  for ((r = 0; r < rounds; r++)); do
    for ((k = 0; k < n; k++)); do
      name=${names[$(((k + r) % n))]}
      t=$(run_one "$name" 2>&1 | grep -o 'time_per_step_ms=[0-9.]*' | head -1 | cut -d= -f2 ||
          true)
      times[$name]+="${t:-nan} "
    done
  done
  echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
}

md_median() {
  tr ' ' '\n' | grep -v '^$' | sort -g |
    awk '{a[NR]=$1} END {print (NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2}'
}

md_table() {
  local reference_of=$1 name m ref ratio
  printf "%-26s %10s %8s   %s\n" run "ms/step" "ratio" rounds
  [[ -z ${MD_CSV:-} ]] || echo "run,ms_per_step,ratio,reference" > "$MD_CSV"
  for name in "${names[@]}"; do
    m=$(echo "${times[$name]}" | md_median)
    ref=$(echo "${times[$($reference_of "$name")]}" | md_median)
    ratio=$(echo "$m / $ref" | bc -l)
    printf "%-26s %10.3f %8.2f   %s\n" "$name" "$m" "$ratio" "${times[$name]}"
    [[ -z ${MD_CSV:-} ]] ||
      printf "%s,%.3f,%.2f,%s\n" "$name" "$m" "$ratio" "$($reference_of "$name")" >> "$MD_CSV"
  done
}
