#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Does what docs/getting_started.md says, in a fresh directory, and checks what it prints.

    getting_started.py <page.md> <install prefix> <work dir>

The page's code blocks that start with a `file:` comment are written to the work directory
under that name; its shell blocks run there in order with bash -e, HOME pointing at a directory
whose `commx` is the install prefix (the packaging tests' install tree stands for the page's
first block, which installs commx from a clone: the first shell block is not run). Exits 0 when
every block ran and each program printed its line and a table of counters.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
FILE = re.compile(r"^(?://|#) file: (\S+)\n")


def main() -> int:
    page, prefix, work = Path(sys.argv[1]), Path(sys.argv[2]).resolve(), Path(sys.argv[3])
    if work.exists():
        subprocess.run(["rm", "-rf", str(work)], check=True)
    home = work / "home"
    project = work / "project"
    home.mkdir(parents=True)
    project.mkdir()
    (home / "commx").symlink_to(prefix)
    env = dict(os.environ, HOME=str(home))
    if os.environ.get("CMAKE_CXX_COMPILER_LAUNCHER") == "ccache" and "CCACHE_DIR" not in env:
        # The caller's compiler cache (the test command's), which the new HOME would hide.
        env["CCACHE_DIR"] = subprocess.run(["ccache", "--get-config", "cache_dir"], check=True,
                                           capture_output=True, text=True).stdout.strip()
    for var in ("COMMX_ROOT", "COMMX_RANK", "COMMX_SIZE", "COMMX_TOKEN"):
        env.pop(var, None)
    blocks = BLOCK.findall(page.read_text(encoding="utf-8"))
    shell = [body for lang, body in blocks if lang == "sh"]
    files = 0
    for lang, body in blocks:
        named = FILE.match(body)
        if named:
            (project / named.group(1)).write_text(body, encoding="utf-8")
            files += 1
    if files < 2 or len(shell) < 3:
        print(f"getting_started: the page has {files} files and {len(shell)} shell blocks; "
              "expected 2 files and 3 shell blocks (install, build, run)")
        return 1
    printed = ""
    for body in shell[1:]:
        print(f"$ {body.strip()}", flush=True)
        done = subprocess.run(["bash", "-e", "-c", body], cwd=project, env=env, text=True,
                              capture_output=True, timeout=600)
        sys.stdout.write(done.stdout[-4000:])
        sys.stdout.write(done.stderr[-4000:])
        if done.returncode != 0:
            print(f"getting_started: the block above failed (exit {done.returncode})")
            return 1
        printed += done.stdout
    ok = True
    for stack in ("shm", "tcp"):
        line = f"ring_{stack}: 4 ranks, rank 0 heard 3, the sum of ranks is 6"
        if line not in printed:
            print(f"getting_started: no line '{line}'")
            ok = False
    # commxrun puts each line of rank i after "[i] ".
    if len(re.findall(r"^\[0\] op +calls +msgs out", printed, re.M)) != 2 or \
            len(re.findall(r"^\[0\] allreduce +1 ", printed, re.M)) != 2:
        print("getting_started: each program should print a counter table with one allreduce")
        ok = False
    print("getting_started: the page's program built and ran on both stacks" if ok else
          "getting_started: FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
