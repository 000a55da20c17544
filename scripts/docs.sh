#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# The API reference: Doxygen over the public headers (include/commx, without detail/) and the
# pages in docs/, as HTML in build/docs/html or the directory given. Any Doxygen warning fails
# the script (docs/Doxyfile: WARN_AS_ERROR = FAIL_ON_WARNINGS), after all of them are printed.
set -euo pipefail
cd "$(dirname "$0")/.."

html=${1:-build/docs/html}
mkdir -p "$html"
html=$(cd "$html" && pwd)

if ! command -v doxygen >/dev/null; then
  echo "docs: doxygen is not installed (bash scripts/setup.sh installs it)" >&2
  exit 1
fi

echo "=== docs: doxygen $(doxygen --version) -> $html"
warnings=$(mktemp)
trap 'rm -f "$warnings"' EXIT
# Doxygen reads the Doxyfile from stdin, so the paths are appended rather than edited in.
# OUTPUT_DIRECTORY is only where Doxygen may put scratch files; everything goes to HTML_OUTPUT.
status=0
{
  cat docs/Doxyfile
  echo "OUTPUT_DIRECTORY = $(dirname "$html")"
  echo "HTML_OUTPUT = $html"
  echo "WARN_LOGFILE = $warnings"
} | doxygen - || status=$?
count=$(grep -c . "$warnings" || true)
if ((status != 0 || count != 0)); then
  cat "$warnings" >&2
  echo "docs: FAILED, doxygen exited with $status and $count warning line(s)" >&2
  exit 1
fi
echo "docs: 0 warnings; open $html/index.html"
