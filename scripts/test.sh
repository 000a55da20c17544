#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The test command: installs what is missing, checks the format and the API reference, then
# builds and runs each suite once, in one of four builds (tests/CMakeLists.txt,
# COMMX_TEST_FOCUS), warnings as errors in all: ci (no debug information: every suite that no
# sanitizer build runs), mpich (the MPI suites against MPICH, and every public header compiled
# alone), ASan+UBSan (at -O0) on the suites that handle memory and TSan on those whose ranks
# are threads. mpich is compiled by GCC, the others by clang, which compiles commx's tests 1.1
# to 1.7 times faster; the packaging tests' consumer projects by the system's c++ (GCC), on
# every stack. So commx is checked with both. shm's suites are built once more by GCC at -O3
# (the release preset), for the warnings only inlining brings out. Exits non-zero if anything
# fails.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step says when it starts, in minutes and seconds since the command began (bash's
# SECONDS), so that a slow run shows where its time went.
say() { printf '=== [%d:%02d] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }

bash scripts/setup.sh

say "format (.clang-format)"
mapfile -t sources < <(find include tools tests examples bench -name '*.hpp' -o -name '*.cpp')
clang-format --dry-run --Werror "${sources[@]}"

say "API reference (Doxygen; a warning fails it)"
bash scripts/docs.sh

# Within one run, what two builds compile alike is compiled once (the package tests'
# consumers); across runs, what did not change.
source scripts/compiler_cache.sh

jobs=$(nproc)
run_preset() {
  local preset=$1
  say "${preset}: configure and build"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$jobs"
  say "${preset}: test"
  # CTest starts the tests it expects to take longest first, so that they overlap the many
  # short ones instead of ending the run alone; in a fresh build tree it learns what to expect
  # from the times of an earlier run (tests/ctest_costs/, CTest's own format).
  local costs=build/$preset/Testing/Temporary/CTestCostData.txt
  if [[ ! -f $costs && -f tests/ctest_costs/$preset.txt ]]; then
    mkdir -p "$(dirname "$costs")"
    cp "tests/ctest_costs/$preset.txt" "$costs"
  fi
  ctest --preset "$preset" -j "$jobs"
}

run_preset ci

# transport::mpi and coll::native against MPICH too: only the MPI targets and their tests, at 1
# to 3 ranks: MPICH's ranks poll (yielding each time), and 4 of them on 2 cores took 95 s in the
# collectives where Open MPI takes 13, 27 s in transport.mpi where 3 take 3; Open MPI runs every
# count.
run_preset mpich

# GCC at -O3, as the main job and the benches are built: some warnings come only from the
# optimiser's inlining (-Warray-bounds on shm's small copies did, unseen by the builds above).
# The shm suites, which hold the most hand-written copying, built and run that way.
say "release: shm's suites, GCC -O3"
cmake --preset release >/dev/null
cmake --build --preset release -j "$jobs" --target transport.shm_ring conformance.shm commxrun
ctest --test-dir build/release -R '^(transport\.shm_ring|conformance\.shm\.)' -j "$jobs" \
  --output-on-failure

# Sanitizers: leaks, overflows and undefined behaviour; then data races between ranks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
run_preset asan
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
run_preset tsan

say "all builds passed"
