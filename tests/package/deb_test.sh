#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The Debian package, end to end: cpack -G DEB from a built commx build directory, the package's
# contents and declared dependencies checked, `apt-get install` of it, a consumer built against
# /usr with find_package (no prefix path) and with pkg-config (no PKG_CONFIG_PATH) and run, then
# `apt-get remove` and nothing of it left behind.
#   deb_test.sh <commx build dir> <work dir>
# Installs into /usr, so it needs root and must not run beside anything else using apt or dpkg
# (its CTest, package.deb, holds the lock system_packages; the other package tests find the
# install tree first, by their prefix path). Exits 77 (CTest's SKIP_RETURN_CODE) when it cannot
# run here: not root, or no apt-get/dpkg-deb.
set -euo pipefail
build_dir=$(realpath "$1")
work=$2
here=$(cd "$(dirname "$0")" && pwd)

if [[ $(id -u) -ne 0 ]]; then
  echo "deb_test: skipped: installing a package needs root"
  exit 77
fi
for tool in apt-get dpkg dpkg-deb dpkg-shlibdeps cpack timeout; do
  if ! command -v "$tool" >/dev/null; then
    echo "deb_test: skipped: no $tool"
    exit 77
  fi
done

installed() { dpkg-query -W -f='${Status}' commx 2>/dev/null | grep -q "install ok installed"; }
# Any trace of the package in dpkg's database: installed, half-installed, unpacked, config-files.
present() {
  local status
  status=$(dpkg-query -W -f='${Status}' commx 2>/dev/null) && [[ $status != *not-installed* ]]
}
# apt and dpkg bounded in time: a lock held elsewhere or a dependency to fetch fails the test
# rather than hanging it (scripts/setup.sh installed every dependency; apt-get's --no-download
# would say so outright, but it refuses local .deb files).
apt() { timeout 180 apt-get -o DPkg::Lock::Timeout=60 -o Acquire::Retries=0 -y -qq "$@"; }
# Run "$@" with its output in a log, shown only if it fails.
logged() {
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { cat "$log"; echo "deb_test: failed: $*" >&2; exit 1; }
}

# The package this test installs carries a marker outside the build tree, so a run that CTest
# killed mid-way (SIGKILL: no trap runs) is cleaned up by the next; a commx installed by
# someone else is never touched.
marker=/var/tmp/commx-deb-test.installed
if present; then
  if [[ -e $marker ]]; then
    echo "deb_test: purging the package an interrupted earlier run left"
    apt purge commx >/dev/null
    rm -f "$marker"
  else
    echo "deb_test: a commx package is installed that this test did not install; not touching it" >&2
    exit 1
  fi
fi
# Whatever happens below, the system is left without the package.
trap 'if present; then apt purge commx >/dev/null || true; fi; rm -f "$marker"' EXIT

rm -rf "$work"
mkdir -p "$work"
export DEBIAN_FRONTEND=noninteractive

echo "=== cpack -G DEB"
logged "$work/cpack.log" cpack -G DEB --config "$build_dir/CPackConfig.cmake" -B "$work/cpack"
debs=("$work"/cpack/commx_*.deb)
deb=${debs[0]}
[[ -f $deb ]] || { cat "$work/cpack.log"; echo "deb_test: cpack made no commx_*.deb" >&2; exit 1; }
echo "made $(basename "$deb")"
arch=$(dpkg --print-architecture)
[[ $(basename "$deb") == commx_*_"$arch".deb ]] ||
  { echo "deb_test: unexpected name $deb" >&2; exit 1; }

contents=$(dpkg-deb -c "$deb")
for file in usr/include/commx/commx.hpp usr/include/commx/transport/tcp.hpp \
            usr/lib/cmake/commx/commxConfig.cmake usr/lib/cmake/commx/commx-targets.cmake \
            usr/lib/cmake/commx/commx-tcp-targets.cmake usr/lib/cmake/commx/CommxVariants.cmake \
            usr/lib/pkgconfig/commx.pc usr/lib/pkgconfig/commx-tcp.pc \
            usr/bin/commxrun usr/bin/commx-relay; do
  grep -q " \./$file\$" <<<"$contents" || { echo "deb_test: the package lacks /$file" >&2; exit 1; }
done
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for dep in libasio-dev libfmt-dev libcereal-dev libssl-dev; do
  grep -qw "$dep" <<<"$depends" || { echo "deb_test: Depends lacks $dep" >&2; exit 1; }
done

echo "=== apt-get install"
touch "$marker"
logged "$work/install.log" apt install "$deb"
installed || { cat "$work/install.log"; echo "deb_test: commx is not installed" >&2; exit 1; }
mapfile -t owned < <(dpkg -L commx | while read -r path; do [[ -f $path ]] && echo "$path"; done)
echo "the package owns ${#owned[@]} files"

echo "=== a consumer against /usr: find_package"
logged "$work/consumer.log" cmake -S "$here/consumer" -B "$work/consumer" -G Ninja \
  -DCOMMX_TEST_COMPONENTS="inproc;tcp"
grep -q "^commx_DIR:PATH=/usr/lib/cmake/commx$" "$work/consumer/CMakeCache.txt" ||
  { echo "deb_test: find_package did not find /usr's commx" >&2; exit 1; }
logged "$work/build.log" cmake --build "$work/consumer"
COMMX_INPROC_RANKS=4 "$work/consumer/hello_inproc" | tee "$work/run.log"
commxrun -n 2 --timeout 60 "$work/consumer/hello_tcp" | tee -a "$work/run.log"
[[ $(command -v commxrun) == /usr/bin/commxrun ]] ||
  { echo "deb_test: commxrun is not /usr's" >&2; exit 1; }
grep -q "hello_inproc: sum of ranks 0..3 = 6" "$work/run.log"
grep -q "hello_tcp: sum of ranks 0..1 = 1" "$work/run.log"

echo "=== a consumer against /usr: pkg-config"
mkdir -p "$work/make"
env -u PKG_CONFIG_PATH make -s -C "$work/make" -f "$here/makefile_consumer/Makefile" \
  SOURCE_DIR="$here" STACKS=inproc
COMMX_INPROC_RANKS=3 "$work/make/hello_inproc" | grep "hello_inproc: sum of ranks 0..2 = 3"

echo "=== apt-get remove"
logged "$work/remove.log" apt remove commx
! installed || { echo "deb_test: commx is still installed" >&2; exit 1; }
for path in "${owned[@]}"; do
  [[ ! -e $path ]] || { echo "deb_test: $path is left behind" >&2; exit 1; }
done
for dir in /usr/include/commx /usr/lib/cmake/commx; do
  [[ ! -e $dir ]] || { echo "deb_test: $dir is left behind" >&2; exit 1; }
done
echo "deb_test: passed"
