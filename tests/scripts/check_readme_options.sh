#!/usr/bin/env bash
# tests/scripts/check_readme_options.sh MOONLET README - the README's option
# list (between its "options:" and "end of options" markers) is exactly what
# `moonlet config --markdown` prints from the configuration tables. Run by
# CTest (test_readme_options, label unit). After adding or changing an
# option, rewrite the README's list with
#   tests/scripts/check_readme_options.sh build/launch/moonlet README.md --update
set -u
M=$1
README=$2
want=$(mktemp)
have=$(mktemp)
trap 'rm -f "$want" "$have"' EXIT
"$M" config --markdown >"$want" || { echo "moonlet config --markdown failed"; exit 1; }
if [ "${3:-}" = --update ]; then
    awk -v gen="$want" '
        /^<!-- end of options -->/ { while ((getline l < gen) > 0) print l; skip = 0 }
        !skip { print }
        /^<!-- options:/ { skip = 1 }' "$README" >"$have" && cp "$have" "$README" &&
        echo "updated the option list of $README"
fi
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
