#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The main job: installs what is missing, builds the examples optimised, and runs the
# in-process pi example on 1, 2 and 4 ranks, printing what each computed.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
cmake --preset release >/dev/null
cmake --build --preset release -j "$(nproc)" --target pi_inproc commxrun

for ranks in 1 2 4; do
  echo "=== pi on the in-process stack, ${ranks} rank(s)"
  COMMX_INPROC_RANKS=$ranks ./build/release/examples/pi/pi_inproc 20000000
done
