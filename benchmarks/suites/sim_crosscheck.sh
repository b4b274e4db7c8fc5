#!/usr/bin/env bash
# benchmarks/suites/sim_crosscheck.sh - the simulator against the real cluster
# (issue #16): stories260K fitted on this machine, then a scaled-down
# synthetic trace (lengths / 32, arrivals 20x faster, 512-token context)
# replayed per policy on a real in-process cluster of the same actors (CPU
# engine, wall clock) and in the simulator with the fitted profile. One JSON
# line per policy: TTFT median and mean, TBT median (requests of two tokens
# or more), real beside simulated; the policies' order must agree.
# The fit (moonlet calibrate) is the engine's start-up timing refitted in
# service: the next N requests of the same trace (a slice the check does not
# replay) on a real cluster of the same shape under least-loaded, so the
# profile carries what serving adds on this machine as it is loaded now
# (slower calls with the cores shared, the overhead per request and per
# decode step, the messages) - the start-up timing alone, best of five warm
# calls on an idle engine, put the simulator 20-60 % short on TTFT and 2-5x
# short on TBT. The "fit" field has the slice's own real and simulated
# medians. On a shared machine the real figures move with the load: run it
# when the machine is otherwise idle, or with R=3: each real replay runs R
# times and its figures are the median of the runs' (the runs' TTFT medians
# listed beside them; the simulator is deterministic, one run).
# Env: N requests (300), TS time scale (0.05), R real runs (1), P / DD prefill / decode
# instances (2 / 2: on a 2-core machine more engine threads than cores make
# the real cluster CPU-bound where the simulator gives each its own device),
# POLICIES (random least-loaded mooncake), MOON (build/launch/moonlet).
set -euo pipefail
MOON=${MOON:-${BUILD_DIR:-build}/launch/moonlet}
M=examples/models/stories260K/stories260K.gguf
T=tests/data/traces/synthetic_trace.jsonl
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
S=(--trace "$T" --time-scale "${TS:-0.05}" --nodes-prefill "${P:-2}" --nodes-decode "${DD:-2}"
   --block-tokens 16 --block-scale 16 --max-context 512)
C=("${S[@]}" --max-requests "${N:-300}")
"$MOON" calibrate --model "$M" --out "$D/fit.json" --max-batch 32 "${S[@]}" \
    --skip-requests "${N:-300}" --max-requests "${N:-300}" >"$D/fit.txt" 2>/dev/null
# median of column c of requests.csv (9 ttft_s, 10 tbt_s: outputs of 2+ tokens only)
med() {
    awk -F, -v c="$2" 'NR > 1 && $12 == "ok" && (c != 10 || $6 > 1) { print $c }' "$1" | sort -g |
        awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
mean() { awk -F, 'NR > 1 && $12 == "ok" { s += $9; n++ } END { print s / n }' "$1"; }
# median of the arguments
mid() {
    printf '%s\n' "$@" | sort -g |
        awk '{ a[NR] = $1 } END { print NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'
}
for pol in ${POLICIES:-random least-loaded mooncake}; do
    rt=() rm=() rb=()
    for k in $(seq "${R:-1}"); do
        "$MOON" replay "${C[@]}" --real --model "$M" --policy "$pol" --out "$D/real_${pol}_$k" \
            >/dev/null 2>&1
        r=$D/real_${pol}_$k/requests.csv
        rt+=("$(med "$r" 9)") rm+=("$(mean "$r")") rb+=("$(med "$r" 10)")
    done
    "$MOON" replay "${C[@]}" --sim --profile "$D/fit.json" --policy "$pol" --out "$D/sim_$pol" \
        >/dev/null 2>&1
    s=$D/sim_$pol/requests.csv
    printf '{"bench": "sim_crosscheck", "policy": "%s", "requests": %s, "prefill": %s, "decode": %s, ' \
        "$pol" "${N:-300}" "${P:-2}" "${DD:-2}"
    printf '"real_ttft_median_s": %s, "sim_ttft_median_s": %s, "real_ttft_mean_s": %s, ' \
        "$(mid "${rt[@]}")" "$(med "$s" 9)" "$(mid "${rm[@]}")"
    printf '"sim_ttft_mean_s": %s, "real_tbt_median_s": %s, "sim_tbt_median_s": %s, ' \
        "$(mean "$s")" "$(mid "${rb[@]}")" "$(med "$s" 10)"
    printf '"real_ttft_median_runs_s": [%s], "fit": %s}\n' "$(IFS=,; echo "${rt[*]}")" \
        "$(cat "$D/fit.txt")"
done
