#!/usr/bin/env bash
# tests/scripts/check_readme_options.sh MOONLET README - the README's option
# list (between its "options:" and "end of options" markers) is exactly what
# `moonlet config --markdown` prints from the configuration tables. Run by
# CTest (test_readme_options, label unit). To update the README:
#   moonlet config --markdown, pasted between the markers.
set -u
M=$1
README=$2
want=$(mktemp)
have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT
"$M" config --markdown >"$want" || { echo "moonlet config --markdown failed"; exit 1; }
sed -n '/^<!-- options:/,/^<!-- end of options -->/p' "$README" | sed '1d;$d' >"$have"
if [ ! -s "$have" ]; then
    echo "no option list between the markers in $README"
    exit 1
fi
if ! diff -u "$have" "$want"; then
    echo "the README's option list differs from moonlet config --markdown (diff above: - README, + tables)"
    exit 1
fi
echo "the README's option list matches the tables ($(grep -c '^| `--' "$want") options)"
