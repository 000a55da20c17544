#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Installs what commx needs to build, test and run its examples, from Debian's packages only.
# Idempotent and quick when everything is present: apt is only called for what is missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config clang-format ccache
  libasio-dev libfmt-dev catch2 libcereal-dev libbenchmark-dev
  # Open MPI: the benchmarks compare commx with its collectives (and CI compiles that driver);
  # commx::mpi is built and tested against it, and against MPICH (the "mpich" preset).
  # Open MPI stays the system's default MPI (its alternatives rank higher on Debian).
  libopenmpi-dev openmpi-bin libmpich-dev mpich python3
  # commx::pmix: network stacks started by mpirun or srun --mpi=pmix take their endpoints from
  # the launcher's PMIx server (include/commx/bootstrap/pmix.hpp).
  libpmix-dev
  # commx::simgrid: a simulated cluster as a stack (include/commx/transport/simgrid.hpp).
  libsimgrid-dev
  # commx::ucx: messages through UCX's tag API, for InfiniBand and RoCE (transport/ucx.hpp);
  # ucx_perftest, the floor bench/ucx_vs_mpich.sh measures it against.
  libucx-dev ucx-utils
  # The main job's chart (scripts/md_compare.py).
  python3-matplotlib
  # The N-body example's particle-mesh solve (examples/nbody_wide).
  libfftw3-dev
  # tcp: OpenSSL (libcrypto's HMAC, libssl's TLS; the openssl tool makes the TLS tests'
  # certificates), ip for the network-namespace tests, clang with libFuzzer for the frame and
  # handshake fuzz target, iperf3 for the loopback bandwidth reference (and, with ip, for the
  # wide-area link emulator tools/wanemu and its iperf3 ceiling in bench/wan/).
  libssl-dev openssl iproute2 clang libclang-rt-14-dev iperf3
  # The API reference (scripts/docs.sh); no graphviz: the reference draws no graphs.
  doxygen
  # The packaging tests: a Makefile consumer (make) and the .deb (cpack -G DEB runs dpkg-shlibdeps).
  make dpkg-dev
)

missing=()
for pkg in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages present"
  exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
