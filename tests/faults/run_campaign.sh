#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The fault campaign: randomized fault plans (transport/fault_plan.hpp) against the workload
# (workload.cpp) on each stack given, every run bounded in time. A run passes when each rank
# either finished, raised a typed error, or was killed by the plan; when nothing was delivered
# corrupt or twice; and when no process or shared-memory segment is left behind. Every second
# schedule runs the workload with --recover: the survivors of a loss (or of a timeout: a stall,
# a partition) revoke, shrink and go on, and every rank that finishes must end with the same
# members and the same count of recoveries (else a disagreement). Prints one summary line, and
# for each failing run its output and the plan that replays it.
#
#   run_campaign.sh COMMXRUN RANKS SCHEDULES FIRST_SEED STACK=PROGRAM...
#
# STACK is a name for the summary (inproc, shm, tcp); a program whose stack runs on threads
# (inproc) is started as one process of RANKS threads.
set -u

commxrun=$1 ranks=$2 schedules=$3 first_seed=$4
shift 4

run_bound=40 # seconds a run may take: the longest stall (2.5 s) and deadlines (2 s) fit many times
schedules_run=0 faults_planned=0 faults_fired=0 hangs=0 crashes=0 leaks=0 wrong=0 failures=0
recovering=0 recoveries=0 disagreements=0
per_stack=""
log=$(mktemp)
trap 'rm -f "$log"' EXIT

shm_entries() { find /dev/shm -maxdepth 1 -name 'commx*' 2>/dev/null | sort; }

for pair in "$@"; do
  stack=${pair%%=*} program=${pair#*=}
  name=$(basename "$program")
  launched=$ranks
  [[ $stack == inproc ]] && launched=1
  for ((k = 0; k < schedules; ++k)); do
    seed=$((first_seed + k))
    before=$(shm_entries)
    mode=()
    ((k % 2 == 1)) && mode=(--recover) recovering=$((recovering + 1))
    COMMX_FAULTS="random;seed=$seed" COMMX_TIMEOUT=2 COMMX_INPROC_RANKS=$ranks \
      "$commxrun" -n "$launched" --keep-going --timeout "$run_bound" "$program" "${mode[@]}" \
      >"$log" 2>&1
    status=$?
    schedules_run=$((schedules_run + 1))
    problem=""
    plan=$(sed -n 's/.*plan \(seed=.*\)/\1/p' "$log" | head -n 1)
    planned=$(tr ';' '\n' <<<"$plan" | grep -cvE '^(seed=|$)')
    faults_planned=$((faults_planned + planned))
    fired=$(grep -cE 'by its fault plan' "$log")
    faults_fired=$((faults_fired + fired))
    if ((status == 124)); then
      hangs=$((hangs + 1)) problem="hang (no end within ${run_bound} s)"
    fi
    for ((r = 0; r < ranks; ++r)); do
      if grep -qE "outcome rank=$r (CORRUPT|DUPLICATE)" "$log"; then
        wrong=$((wrong + 1)) problem="rank $r received wrong data"
      elif grep -qE "outcome rank=$r (finished|error|killed)" "$log"; then
        :
      elif [[ $stack != inproc ]] && grep -q "rank $r killed by its fault plan" "$log" &&
        grep -q "rank $r was killed by signal 9" "$log"; then
        :
      elif [[ -z $problem ]]; then
        crashes=$((crashes + 1)) problem="rank $r ended without an outcome"
      fi
    done
    ends=$(sed -n 's/.*outcome rank=[0-9]* finished \(.*\)/\1/p' "$log" | sort -u)
    if (($(grep -c . <<<"$ends") > 1)); then
      disagreements=$((disagreements + 1)) problem="the finishing ranks disagree: $(tr '\n' ' ' <<<"$ends")"
    fi
    made=$(sed -n 's/.*recoveries=\([0-9]*\)/\1/p' <<<"$ends" | head -n 1)
    recoveries=$((recoveries + ${made:-0}))
    if grep -qE 'was killed by signal ([^9]|9[0-9])' "$log"; then
      crashes=$((crashes + 1)) problem="a rank crashed"
    fi
    if grep -qE 'exited with status ([014-9]|[0-9][0-9]+)' "$log"; then
      crashes=$((crashes + 1)) problem="a rank exited with an unexpected status"
    fi
    after=$(shm_entries)
    if [[ $after != "$before" ]] || pgrep -f "^$program" >/dev/null; then
      leaks=$((leaks + 1)) problem="left something behind: $(comm -13 <(echo "$before") <(echo "$after") | tr '\n' ' ')"
      pkill -KILL -f "^$program" 2>/dev/null
    fi
    if [[ -n $problem ]]; then
      failures=$((failures + 1))
      echo "--- $stack seed $seed: $problem (replay: COMMX_FAULTS='$plan' $name ${mode[*]})"
      cat "$log"
    fi
  done
  per_stack+=" $schedules $stack"
done

echo "fault campaign: ${schedules_run} schedules run (${per_stack# }), ${faults_planned} faults" \
  "injected (${faults_fired} kills, stalls, damaged frames and strangers fired; delays and" \
  "partitions act throughout), hangs ${hangs}, crashes ${crashes}, leaks ${leaks}," \
  "corrupt or duplicate ${wrong}; ${recovering} schedules recovering: recoveries ${recoveries}," \
  "disagreements ${disagreements}"
((failures == 0))
