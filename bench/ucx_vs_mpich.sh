#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# transport::ucx against MPICH's ch4:ucx (Debian's MPICH: one UCX under both) and against UCX's
# own ucx_perftest (the floor), on 2 ranks, with the same UCX_TLS for all three: each round runs
# each of them once per UCX_TLS, so a slow spell of a shared machine falls on all alike.
#   bash bench/ucx_vs_mpich.sh [rounds] [UCX_TLS ...]   (default: 5 rounds; tcp,self sm,self)
# BENCH_MODE=slow (or fast) starts each round once the VM is in that mode (a cache line's crossing
# 100 ns or more, or under), waiting BENCH_MODE_WAIT seconds at most (120), as pmb_sweep.py --mode
# does: the VM changes mode every few minutes, and without it a run gathers few rounds of one.
# (after: cmake --preset release && cmake --build --preset release --target bench_pingpong_ucx
# commxrun bench_cache_line). Builds the raw-MPI driver against MPICH by hand (mpicxx.mpich)
# into build/mpich/ as bench/shm_vs_mpi.sh does. JSON and logs per run go to results/bench/ucx/;
# the medians and ratios are printed and written to results/bench/ucx/summary.{md,csv}.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift || true
tls_list=("$@")
[[ ${#tls_list[@]} -gt 0 ]] || tls_list=(tcp,self sm,self)
release=build/release
out=results/bench/ucx
mkdir -p "$out" build/mpich
command -v ucx_perftest > /dev/null || { echo "ucx_perftest: apt-get install ucx-utils" >&2; exit 1; }
common=(--benchmark_filter='(pingpong|bandwidth|bandwidth-onebuf)/[^/]+/(8|65536|4194304)/'
        --benchmark_min_time=0.2 --benchmark_min_warmup_time=0.1 --benchmark_out_format=json)
mpich_bench=build/mpich/bench_mpi_pingpong
if [[ ! -x $mpich_bench || bench/mpi_pingpong_bench.cpp -nt $mpich_bench ]]; then
  mpicxx.mpich -O2 -DNDEBUG -std=c++20 -DMPICH_SKIP_MPICXX=1 -Ibench \
    bench/mpi_pingpong_bench.cpp -lbenchmark -lpthread -o "$mpich_bench"
fi
# ucx_perftest's server and client on loopback: `test size iterations` -> its Final line.
port=13500
perftest() {
  port=$((port + 1))
  timeout 150 ucx_perftest -t "$1" -s "$2" -n "$3" -p "$port" > /dev/null 2>&1 &
  local server=$!
  local line=""
  for ((try = 0; try < 50; ++try)); do  # the server's port opens within a few ms
    line=$(timeout 120 ucx_perftest 127.0.0.1 -t "$1" -s "$2" -n "$3" -p "$port" 2>/dev/null |
      grep '^Final:' || true)
    [[ -n $line ]] && break
    sleep 0.1
  done
  wait "$server" || true
  echo "$line"
}
wait_for_mode() {
  [[ -n ${BENCH_MODE:-} ]] || return 0
  local until=$((SECONDS + ${BENCH_MODE_WAIT:-120})) ns
  while ((SECONDS < until)); do
    ns=$(python3 -c "import sys; sys.path.insert(0, 'scripts'); from pathlib import Path
from launching import cache_line_ns; print(int(cache_line_ns(Path('$release')) or 0))")
    [[ $BENCH_MODE == slow ]] && ((ns >= 100)) && return 0
    [[ $BENCH_MODE == fast ]] && ((ns > 0 && ns < 100)) && return 0
    sleep 3
  done
}
for ((r = 1; r <= rounds; r++)); do
  wait_for_mode
  "$release/bench/bench_cache_line" --benchmark_out_format=json \
    --benchmark_out="$out/cache-line.$r.json" > /dev/null 2>&1
  for tls in "${tls_list[@]}"; do
    export UCX_TLS=$tls
    at=${tls//,/-}.$r
    "$release/tools/commxrun/commxrun" -n 2 --timeout 300 "$release/bench/bench_pingpong_ucx" \
      "${common[@]}" --benchmark_out="$out/ucx.$at.json" > /dev/null
    # Bounded: MPICH over UCX's tcp once spun for 20 minutes in a ping-pong here (the round's
    # MPICH figures are then missing, and the medians are over the rounds that ended).
    timeout 120 mpiexec.mpich -bind-to none -n 2 "$mpich_bench" "${common[@]}" \
      --benchmark_out="$out/mpich.$at.json" > /dev/null 2>&1 || rm -f "$out/mpich.$at.json"
    {
      echo "lat 8 $(perftest tag_lat 8 200000)"
      echo "bw 8 $(perftest tag_bw 8 1000000)"
      echo "bw 65536 $(perftest tag_bw 65536 20000)"
      echo "bw 4194304 $(perftest tag_bw 4194304 500)"
    } > "$out/perftest.$at.txt"
  done
  # The VM changes mode every few minutes: a round is counted in one mode only if the cache
  # line took as long after it as before.
  "$release/bench/bench_cache_line" --benchmark_out_format=json \
    --benchmark_out="$out/cache-line-after.$r.json" > /dev/null 2>&1
done
unset UCX_TLS
python3 - "$out" "$rounds" "${tls_list[@]}" <<'PY'
import csv, json, os, statistics, sys
out, rounds, tls_list = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
GIB = 2.0 ** 30
# A window's receives land in a buffer each ("bandwidth", as MPI codes receive) or all in one
# ("one buffer", as ucx_perftest's tag_bw and OSU's osu_bw do: at 4 MiB that one buffer stays
# in the caches where the window's 256 MiB cannot). The floor is compared with one buffer only.
ONE_BUFFER = ", one buffer"
def measures(path):
    """(measure, value): half round trip in us, 8-byte messages per second in millions,
    bandwidth in GiB/s."""
    for b in json.load(open(path))["benchmarks"]:
        what, _, size = b["name"].split("/")[:3]
        into = ONE_BUFFER if what == "bandwidth-onebuf" else ""
        if what == "pingpong" and size == "8":
            yield "8 B half round trip (us)", b["half_rtt"] * 1e6
        elif what.startswith("bandwidth") and size == "8":
            yield f"8 B windowed rate{into} (M msg/s)", b["bytes_per_second"] / 8 / 1e6
        elif what.startswith("bandwidth"):
            yield f"{int(size) // 1024} KiB bandwidth{into} (GiB/s)", b["bytes_per_second"] / GIB
def perftest(path):
    for line in open(path):
        kind, size, *rest = line.split()
        if len(rest) < 9:
            continue
        # Final: iterations lat50 lat_avg lat_overall bw_avg bw_overall rate_avg rate_overall
        f = [float(x) for x in rest[1:]]
        if kind == "lat":
            yield "8 B half round trip (us)", f[2]
        elif size == "8":
            yield f"8 B windowed rate{ONE_BUFFER} (M msg/s)", f[6] / 1e6
        else:
            yield f"{int(size) // 1024} KiB bandwidth{ONE_BUFFER} (GiB/s)", f[4] * 2**20 / GIB
ended = {}  # (lib, UCX_TLS): the rounds whose run ended
def half_rtt_ns(path):
    return json.load(open(path))["benchmarks"][0]["half_rtt"] * 1e9
def mode_of(r):
    """one die (a cache line under 100 ns before and after the round), two dies (over 150 ns
    both times), else mixed."""
    before = half_rtt_ns(f"{out}/cache-line.{r}.json")
    after_path = f"{out}/cache-line-after.{r}.json"
    after = half_rtt_ns(after_path) if os.path.exists(after_path) else before
    if before < 100 and after < 100:
        return "one die"
    return "two dies" if before > 150 and after > 150 else "mixed"
modes = {}
for r in range(1, rounds + 1):
    modes.setdefault(mode_of(r), []).append(r)
def median(lib, tls, reader, suffix, in_rounds):
    rows = {}
    for r in in_rounds:
        path = f"{out}/{lib}.{tls.replace(',', '-')}.{r}.{suffix}"
        if not os.path.exists(path):
            continue
        ended[(lib, tls)] = ended.get((lib, tls), 0) + 1
        for k, v in reader(path):
            rows.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in rows.items()}
def cell(value, digits):
    return "-" if value is None else f"{value:.{digits}}"
def ratio(ours, theirs):
    """None where the other side has no figure (or a zero one) for the measure."""
    return ours / theirs if theirs else None
lines = ["| mode | UCX_TLS | measure | commx ucx | MPICH ch4:ucx | ucx_perftest | ucx / MPICH | "
         "ucx / perftest |", "|---|---|---|---|---|---|---|---|"]
table = []
for mode in ("one die", "two dies", "mixed"):
    if mode not in modes:
        continue
    for tls in tls_list:
        ucx = median("ucx", tls, measures, "json", modes[mode])
        mpich = median("mpich", tls, measures, "json", modes[mode])
        floor = median("perftest", tls, perftest, "txt", modes[mode])
        for key in sorted(ucx, key=lambda k: (int(k.split()[0]), "bandwidth" in k, k)):
            theirs, least = mpich.get(key), floor.get(key)
            cells = [f"{mode} ({len(modes[mode])})", tls, key, cell(ucx[key], "3g"),
                     cell(theirs, "3g"), cell(least, "3g"),
                     cell(ratio(ucx[key], theirs), "2f"),
                     cell(ratio(ucx[key], least), "2f")]
            table.append(cells)
            lines.append("| " + " | ".join(cells) + " |")
line = statistics.median(half_rtt_ns(f"{out}/cache-line.{r}.json") for r in range(1, rounds + 1))
short = [f"{lib} with UCX_TLS={tls} ended {n} of {rounds}" for (lib, tls), n in ended.items()
         if n < rounds]
lines += ["", f"A cache line between the two CPUs: {line:.0f} ns before a round (bench_cache_line, "
          f"median of {rounds} rounds); mode (rounds in it): the same before and after the round, "
          "else mixed. Latency: lower is better; rate and bandwidth: higher. A window's "
          "receives go to a buffer each, or with \"one buffer\" all to one, as ucx_perftest's "
          "do: it is compared with those rows only."
          + (" Rounds: " + "; ".join(short) + "." if short else "")]
text = "\n".join(lines)
print(text)
open(f"{out}/summary.md", "w").write(text + "\n")
with open(f"{out}/summary.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["mode", "UCX_TLS", "measure", "commx ucx", "MPICH ch4:ucx", "ucx_perftest",
                "ucx / MPICH", "ucx / perftest"])
    w.writerows(table)
PY
