#!/usr/bin/env bash
# install_deps.sh - install the Debian packages Moonlet builds and tests with,
# only those that are missing. Idempotent; needs root (or sudo) when anything
# is missing. Used by both README commands (launch/moonlet.sh).
set -euo pipefail

PKGS=(cmake make gcc pkg-config
      libopenmpi-dev openmpi-bin libucx-dev ucx-utils libhwloc-dev hwloc
      libmsgpack-dev libck-dev libcunit1-dev libnuma-dev
      libxxhash-dev libcjson-dev libmicrohttpd-dev libopenblas-dev
      libcurl4-openssl-dev gnuplot-nox curl
      python3 python3-numpy clang-format
      clang libclang-rt-dev # clang + libclang-rt-dev: libFuzzer (tests/fuzz/run.sh)
      stress-ng) # CPU contention for the fault tests (tests/scripts/run_contended.sh)
# Anchors some benchmarks measure against in the same run.
[ "${MOON_BENCH_DEPS:-0}" = 1 ] && PKGS+=(redis-server redis-tools)
# The gateway's API checks (test_gw_api, test_gw_cors_browser): promtool lints
# /metrics, headless Chromium checks CORS from a page; each skipped without.
[ "${MOON_GATEWAY_DEPS:-0}" = 1 ] && PKGS+=(prometheus chromium)
# A one-machine Slurm for the tests labelled slurm (tests/scripts/slurm_ci.sh).
[ "${MOON_SLURM_DEPS:-0}" = 1 ] && PKGS+=(slurmctld slurmd)

missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
echo "install_deps: installing ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
