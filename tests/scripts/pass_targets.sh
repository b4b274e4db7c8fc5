#!/usr/bin/env bash
# tests/scripts/pass_targets.sh BUILD_DIR LABELS - the build targets that the
# tests labelled LABELS (a ctest -L regex) run: the executables of their
# commands that live in BUILD_DIR. A pass that runs a few tests (TSan, CUDA)
# builds these instead of the whole tree. Works on a configured, unbuilt tree:
# ctest names the tests, and their commands come from the CTestTestfile.cmake
# files CMake wrote (ctest itself drops a command whose file is not built).
set -euo pipefail
dir=$1 labels=$2
(cd "$dir" && ctest -N -L "$labels" --show-only=json-v1) | python3 -c '
import json, os, re, shlex, sys
builds = tuple({os.path.realpath(sys.argv[1]) + os.sep, os.path.abspath(sys.argv[1]) + os.sep})
names = {t["name"] for t in json.load(sys.stdin)["tests"]}
add_test = re.compile(r"^add_test\((?:\[=\[(.+?)\]=\]|(\S+)) (.*)\)$")
targets = set()
for root, _, files in os.walk(sys.argv[1]):
    if "CTestTestfile.cmake" not in files:
        continue
    for line in open(os.path.join(root, "CTestTestfile.cmake")):
        m = add_test.match(line.strip())
        if m and (m.group(1) or m.group(2)) in names:
            targets |= {os.path.basename(a) for a in shlex.split(m.group(3))
                        if a.startswith(builds)}
print(" ".join(sorted(targets)))' "$dir"
