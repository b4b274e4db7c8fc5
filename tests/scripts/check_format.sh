#!/usr/bin/env bash
# tests/scripts/check_format.sh - every C source, header and CUDA file that
# git tracks matches the repository's .clang-format, except the files listed
# in tests/scripts/format_pending.txt (not reformatted yet because someone is
# splitting or rewriting them; format one and delete its line when you next
# touch it: the list only shrinks). Run by `launch/moonlet.sh test`; skipped,
# with a message, where clang-format is not installed (install_deps.sh has it).
#   tests/scripts/check_format.sh          check (exit 1 naming each file)
#   tests/scripts/check_format.sh --fix    reformat the files that differ
set -u
cd "$(dirname "$0")/../.."
CF=${CLANG_FORMAT:-clang-format}
if ! command -v "$CF" >/dev/null 2>&1; then
    echo "check_format: $CF not installed, skipped (apt-get install clang-format)"
    exit 0
fi
pending=tests/scripts/format_pending.txt
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    files=$(git ls-files '*.c' '*.h' '*.cu')
else
    files=$(find . -name '*.[ch]' -o -name '*.cu' | sed 's|^\./||' | grep -v '^build')
fi
bad=0
for f in $files; do
    [ -f "$f" ] || continue
    if grep -qxF "$f" "$pending" 2>/dev/null; then
        continue
    fi
    if ! "$CF" --dry-run --Werror "$f" >/dev/null 2>&1; then
        if [ "${1:-}" = --fix ]; then
            "$CF" -i "$f" && echo "formatted $f"
        else
            echo "check_format: $f differs from .clang-format ($CF -i $f)"
            bad=$((bad + 1))
        fi
    fi
done
# pending files that are clean now: their line can go
while read -r f; do
    case $f in '' | '#'*) continue ;; esac
    if [ -f "$f" ] && "$CF" --dry-run --Werror "$f" >/dev/null 2>&1; then
        echo "check_format: $f is formatted now: delete it from $pending"
    fi
done <"$pending"
if [ "$bad" -gt 0 ]; then
    echo "check_format: $bad file(s) differ"
    exit 1
fi
echo "check_format: every file matches .clang-format ($("$CF" --version | head -1))"
