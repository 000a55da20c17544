#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Checks docs/environment.md against the code: every COMMX_ variable read in include/ or tools/
# has a row in the table (its first column), and every COMMX_ name the page mentions is read.
#
# usage: check_environment.sh <source dir> [--without NAME] [--with NAME]
#   --without NAME: check a table with NAME's rows removed (proves a missing row is caught)
#   --with NAME:    check a table with a row for NAME added (proves a stale row is caught)
#
# What counts as read: a string literal that is exactly a variable's name, "COMMX_TIMEOUT",
# outside comments. That is how every lookup names its variable (std::getenv("..."),
# get("...") through bootstrap::lookup, enum_from_env("...", ...), size_from_env(get, "...",
# ...), tables such as {"COMMX_WAN_STREAMS", "streams"}). A literal that ends in `_` is a prefix
# completed at run time (tuned.hpp: "COMMX_COLL_" + the collective's name, upper-cased): the
# table documents it as `PREFIX<...>`, and a name the page mentions, such as
# COMMX_COLL_ALLREDUCE, is read when its tail, lower-cased, is a string literal in include/
# ("allreduce" in stats.hpp).
set -euo pipefail

src=${1:?usage: check_environment.sh <source dir> [--without NAME] [--with NAME]}
shift
without="" with=""
while (($#)); do
  case $1 in
    --without) without=$2; shift 2 ;;
    --with) with=$2; shift 2 ;;
    *) echo "check_environment: unknown argument $1" >&2; exit 2 ;;
  esac
done
cd "$src"
page=docs/environment.md
[[ -f $page ]] || { echo "check_environment: $page is missing" >&2; exit 1; }

# The code without its comments: whole-line comments, and trailing ones after two spaces.
code() {
  find "$@" -type f \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' \) -print0 |
    xargs -0 sed -E -e 's@^[[:space:]]*//.*$@@' -e 's@[[:space:]]+//[^"]*$@@'
}
mapfile -t read_names < <(code include tools | grep -oE '"COMMX_[A-Z0-9_]+"' | tr -d '"' |
                          sort -u)
mapfile -t tails < <(code include | grep -oE '"[a-z][a-z0-9_]*"' | tr -d '"' | sort -u)

table=$(grep -E '^\|' "$page")
if [[ -n $without ]]; then
  table=$(grep -vE "^\| [^|]*\<${without}\>" <<<"$table" || true)
fi
if [[ -n $with ]]; then
  table+=$'\n'"| \`${with}\` | 1 | added by --with |"
fi
# Names in the first column of the table, `PREFIX<...>` kept as PREFIX.
mapfile -t rows < <(cut -d'|' -f2 <<<"$table" | grep -oE 'COMMX_[A-Z0-9_]+' | sort -u)
# Every name the page mentions (the table as checked, and the prose around it).
mapfile -t mentioned < <({ grep -vE '^\|' "$page"; echo "$table"; } |
                         grep -oE 'COMMX_[A-Z0-9_]+' | sort -u)

in_list() {
  local needle=$1 item
  shift
  for item in "$@"; do [[ $item == "$needle" ]] && return 0; done
  return 1
}

failures=0
for name in "${read_names[@]}"; do
  if ! in_list "$name" "${rows[@]}"; then
    where=$(grep -rlF "\"$name\"" include tools | head -1)
    echo "check_environment: $name is read ($where) but has no row in $page" >&2
    failures=$((failures + 1))
  fi
done
for name in "${mentioned[@]}"; do
  in_list "$name" "${read_names[@]}" && continue
  found=false
  for prefix in "${read_names[@]}"; do
    [[ $prefix == *_ && $name == "$prefix"?* ]] || continue
    tail=${name#"$prefix"}
    if in_list "${tail,,}" "${tails[@]}"; then found=true; fi
  done
  if ! $found; then
    echo "check_environment: $name is in $page but nothing in include/ or tools/ reads it" >&2
    failures=$((failures + 1))
  fi
done

if ((failures > 0)); then
  echo "check_environment: FAILED, $failures problem(s)" >&2
  exit 1
fi
echo "check_environment: ${#read_names[@]} names read in include/ and tools/, all in $page;" \
     "${#mentioned[@]} names on the page, all read"
