#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The N-body program as its users run it.
#   program_test.sh same <build dir>        the same particles, bit for bit, on 1 rank, one job
#                                           of 4 ranks (shm, mpi), 2 sites in one communicator
#                                           (shm+tcp+wan) and 2 sites of 2 ranks each its own
#                                           job (shm, or mpi under mpirun) over the emulated
#                                           link with relays (root)
#   program_test.sh lost-relay <build dir>  a relay killed mid-run: every rank stops, each
#   program_test.sh lost-rank <build dir>   saying the wide link was lost; a rank killed: the
#                                           same at the other site, within the time bound
#   program_test.sh stalled-rank <build dir> the other site's leader stopped (SIGSTOP): this
#                                           site's ranks say nothing came within the timeout
#   program_test.sh mismatch <build dir>   two sites given different initial conditions: both
#                                           refuse to start, naming the disagreement
#   program_test.sh files <build dir>       initial conditions written and read back run alike;
#                                           bad options and bad files refused (exit 2)
#   program_test.sh picture <build dir>     the main job's density picture (plot.py): after 150
#                                           steps the particles have gathered into halos (the
#                                           densest 1% of cells hold 20% of the mass and more),
#                                           at the start they have not, and plot.py says so
# Exits 77 (skipped) where a case needs root and this is not.
set -euo pipefail
mode=$1
build=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
programs=$build/examples/nbody_wide
commxrun=$build/tools/commxrun/commxrun
two_sites=(python3 "$here/../../examples/nbody_wide/two_sites.py" --build "$build" --stack shm
           --delay-ms 5 --comm-timeout 30 --timeout 150)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
args=(--lattice 12 --steps 4)

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

fingerprint_of() {
  local line
  line=$(sed -n 's/^\(\[[0-9]*\] \)\{0,1\}final state fingerprint: //p' "$1")
  [[ -n $line ]] || { cat "$1" >&2; fail "$1 has no fingerprint"; }
  echo "$line"
}

# Runs one arrangement, keeping its output; prints its fingerprint.
run_case() {
  local name=$1
  shift
  if ! "$@" >"$work/$name.out" 2>"$work/$name.err"; then
    cat "$work/$name.out" "$work/$name.err" >&2
    fail "$name exited non-zero"
  fi
  grep -q 'step     4' "$work/$name.out" || fail "$name did not report step 4"
  echo "$name: $(fingerprint_of "$work/$name.out")"
}

case $mode in
  picture)
    # 16^3 particles, t = 1.5 (about three free-fall times): 44% measured; at the start 8%
    # (a lattice's noise, 0.1 particles a cell).
    plot=(/usr/bin/python3 "$here/../../examples/nbody_wide/plot.py" --least-clumped 0.2)
    for steps in 1 150; do
      COMMX_INPROC_RANKS=2 "$programs/nbody_wide_inproc" --lattice 16 --steps $steps --dt 0.01 \
        --snapshot "$work/t$steps.bin" >"$work/t$steps.out" 2>&1 || fail "$steps steps failed"
    done
    "${plot[@]}" --snapshot "$work/t150.bin" --density "$work/t150.png" ||
      fail "no structure after 150 steps"
    [[ -s $work/t150.png ]] || fail "no picture drawn"
    if "${plot[@]}" --snapshot "$work/t1.bin" --density "$work/t1.png" 2>"$work/t1.err"; then
      fail "the lattice at its start passed for structure"
    fi
    grep -q "no structure formed" "$work/t1.err" || fail "plot.py did not say why"
    ;;
  same)
    results=()
    results+=("$(run_case one-rank env COMMX_INPROC_RANKS=1 "$programs/nbody_wide_inproc" \
                 "${args[@]}")")
    results+=("$(run_case shm-4 "$commxrun" -n 4 "$programs/nbody_wide_shm" "${args[@]}")")
    results+=("$(run_case inproc-3 env COMMX_INPROC_RANKS=3 "$programs/nbody_wide_inproc" \
                 "${args[@]}")")
    if [[ -x $programs/nbody_wide_shm_tcp_wan ]]; then
      results+=("$(run_case shm_tcp_wan-2-sites "$commxrun" -n 4 --nodes 2 --sites 2 \
                   "$programs/nbody_wide_shm_tcp_wan" "${args[@]}")")
    fi
    if [[ -x $programs/nbody_wide_simgrid ]]; then
      # Two simulated sites joined by a 50 ms wide link (transport::simgrid), 2 ranks each.
      printf 'a-0\na-1\nb-0\nb-1\n' >"$work/two_sites.hosts"
      results+=("$(run_case simgrid-2-sites env COMMX_SIMGRID_PLATFORM=two-sites \
                   COMMX_SIMGRID_RANKS=4 COMMX_SIMGRID_HOSTFILE="$work/two_sites.hosts" \
                   "$programs/nbody_wide_simgrid" "${args[@]}")")
      grep -q "sites in one communicator" "$work/simgrid-2-sites.out" ||
        fail "the simulated run was not at two sites"
      # Each step waits for the mesh sum across the wide link: at least its 50 ms.
      awk '/^nbody result/ { for (i = 1; i <= NF; i++) if ($i ~ /^step_ms=/) {
             split($i, kv, "="); ok = kv[2] >= 50 } } END { exit !ok }' \
        "$work/simgrid-2-sites.out" ||
        fail "a simulated step was shorter than the wide link's latency"
    fi
    if [[ -x $programs/nbody_wide_mpi ]] && command -v mpirun >/dev/null; then
      results+=("$(run_case mpi-4 env OMPI_ALLOW_RUN_AS_ROOT=1 \
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun -np 4 --oversubscribe \
                   --bind-to none --mca btl self,vader --mca mpi_yield_when_idle 1 \
                   "$programs/nbody_wide_mpi" "${args[@]}")")
    fi
    if [[ $(id -u) -eq 0 ]]; then
      results+=("$(run_case two-sites-relayed "${two_sites[@]}" -- "${args[@]}")")
      grep -q "sites as jobs" "$work/two-sites-relayed.out" ||
        fail "the two-site run was not two jobs"
      if [[ -x $programs/nbody_wide_mpi ]] && command -v mpirun >/dev/null; then
        results+=("$(run_case two-mpi-sites-relayed "${two_sites[@]}" \
                     --stack mpi --launcher mpirun -- "${args[@]}")")
      fi
    else
      echo "not root: the two sites joined by the emulated link are not run"
    fi
    printf '%s\n' "${results[@]}"
    expected=${results[0]#*: }
    for r in "${results[@]}"; do
      [[ ${r#*: } == "$expected" ]] || fail "${r%%: *} ended with other particles: ${r#*: }"
    done
    echo "the same particles in ${#results[@]} arrangements"
    ;;
  lost-relay | lost-rank)
    [[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)"; exit 77; }
    target=relay-B
    [[ $mode == lost-rank ]] && target=B:1
    set +e
    "${two_sites[@]}" --kill "$target" --at-step 2 -- --lattice 12 --steps 100000 \
      >"$work/run.out" 2>"$work/run.err"
    code=$?
    set -e
    cat "$work/run.out" "$work/run.err"
    ((code != 0)) || fail "the run went on after $target was killed"
    ((code != 124)) || fail "the run hung after $target was killed"
    grep -q "two_sites.py: killed" "$work/run.out" || fail "nothing was killed"
    # Site A's ranks 0 and 1 each say the link to the other site was lost; with the relay
    # gone, so do site B's ranks 2 and 3; with B's rank killed, B's launcher names it.
    for r in 0 1; do
      grep -q "rank $r: rank 0 (leader of site 0) lost the wide-area link" "$work/run.err" ||
        fail "rank $r did not say that the wide link was lost"
    done
    if [[ $mode == lost-relay ]]; then
      for r in 2 3; do
        grep -q "rank $r: rank 2 (leader of site 1) lost the wide-area link" "$work/run.err" ||
          fail "rank $r did not say that the wide link was lost"
      done
    else
      grep -q "rank 1 was killed by signal 9" "$work/run.err" ||
        fail "site B's launcher did not name the killed rank"
    fi
    ;;
  stalled-rank)
    [[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)"; exit 77; }
    set +e
    "${two_sites[@]}" --comm-timeout 3 --kill B:0 --signal STOP --at-step 2 -- --lattice 12 \
      --steps 100000 >"$work/run.out" 2>"$work/run.err"
    code=$?
    set -e
    cat "$work/run.out" "$work/run.err"
    ((code != 0 && code != 124)) || fail "the run did not stop by itself (exit $code)"
    grep -q "two_sites.py: stopped rank 0 of site B" "$work/run.out" || fail "nothing was stopped"
    for r in 0 1; do
      grep -q "rank $r: rank 0 (leader of site 0) lost the wide-area link to the other site \
(nothing came over it within the timeout)" "$work/run.err" ||
        fail "rank $r did not say that nothing came over the wide link"
    done
    ;;
  mismatch)
    [[ $(id -u) -eq 0 ]] || { echo "needs root (network namespaces)"; exit 77; }
    set +e
    "${two_sites[@]}" --site-b-extra "--seed 7" -- "${args[@]}" >"$work/run.out" \
      2>"$work/run.err"
    code=$?
    set -e
    cat "$work/run.out" "$work/run.err"
    ((code != 0 && code != 124)) || fail "sites with different problems ran (exit $code)"
    for r in 0 1 2 3; do
      grep -q "rank $r: .*runs another problem than site" "$work/run.err" ||
        fail "rank $r did not say that the sites disagree"
    done
    if grep -q "step     0" "$work/run.out"; then fail "the sites began a step"; fi
    ;;
  files)
    program=$programs/nbody_wide_inproc
    run_case made "$program" "${args[@]}" --write-ic "$work/ic.bin" --snapshot "$work/end.bin" \
      --csv "$work/steps.csv" >"$work/made.fp"
    run_case read "$program" --read-ic "$work/ic.bin" --steps 4 >"$work/read.fp"
    [[ $(cut -d' ' -f2 "$work/made.fp") == $(cut -d' ' -f2 "$work/read.fp") ]] ||
      fail "the run from the written initial conditions ended elsewhere"
    (($(wc -l <"$work/steps.csv") == 6)) || fail "the CSV has not a header and 5 steps"
    # The snapshot at the end is a valid start too.
    run_case again "$program" --read-ic "$work/end.bin" --steps 4 >/dev/null
    expect_refused() {
      local why=$1
      shift
      set +e
      "$program" "$@" >"$work/refused.out" 2>&1
      local code=$?
      set -e
      ((code == 2)) || { cat "$work/refused.out"; fail "$why: exit $code, not 2"; }
      grep -qi -- "$why" "$work/refused.out" || { cat "$work/refused.out"; fail "no '$why'"; }
    }
    expect_refused "unknown option" --lattice 8 --frobnicate
    expect_refused "--steps 'x'" --steps x
    expect_refused "theta" --theta 0
    head -c 100 "$work/ic.bin" >"$work/short.bin"
    expect_refused "short.bin" --read-ic "$work/short.bin"
    cp "$work/ic.bin" "$work/flipped.bin"
    printf '\x55' | dd of="$work/flipped.bin" bs=1 seek=200 conv=notrunc status=none
    expect_refused "flipped.bin" --read-ic "$work/flipped.bin"
    expect_refused "missing.bin" --read-ic "$work/missing.bin"
    expect_refused "not a regular file" --read-ic /dev/zero
    expect_refused "cannot write" --lattice 8 --csv "$work/no/such/dir/steps.csv"
    echo "files: written and read back alike; bad options and files refused"
    ;;
  *)
    fail "unknown mode $mode"
    ;;
esac
