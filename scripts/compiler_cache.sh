# SPDX-License-Identifier: MIT
# Sourced by test.sh and main.sh: builds go through ccache (setup.sh installs it), so a second
# run recompiles only what changed, also from a clone in another directory (a CI checks out
# into a new one each time): paths are hashed relative to the clone, and the directory a build
# runs in is not hashed (debug information may then name an earlier clone's).
if command -v ccache >/dev/null; then
  export CMAKE_CXX_COMPILER_LAUNCHER=ccache
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
  export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}
fi
