#!/usr/bin/env bash
# check_layering.sh SRC_DIR - fails when a library includes a layer it must
# not see (STYLE §1): base <- runtime, model, kvstore, scheduler <- actors <-
# launch. model, kvstore and scheduler know nothing of each other, of actors,
# MPI or UCX; runtime knows nothing of LLMs. The build enforces the same
# (cmake/MoonHeaders.cmake: a target sees only the headers of what it links);
# this test also reads sources the build does not compile (CUDA without CUDA).
#
# Which library owns which include/moonlet/ header is read from the
# moon_export_headers() calls in each folder's CMakeLists.txt.
set -u
cd "${1:?usage: check_layering.sh SRC_DIR}"
bad=0

# exports FOLDER: the headers the CMakeLists.txt of FOLDER and of its
# subfolders export, one a line (base/gpu is a layer of its own). Read once
# per folder, up front in this shell (callers run in subshells): process
# starts are slow on a loaded machine.
declare -A exported
for folder in base base/gpu runtime model kvstore scheduler actors launch; do
    depth=()
    [ "$folder" = base ] && depth=(-maxdepth 1)
    [ -d "$folder" ] || continue
    exported[$folder]=$(find "$folder" "${depth[@]}" -name CMakeLists.txt -exec cat {} + |
        tr '\n' ' ' | grep -oE 'moon_export_headers\([^)]*\)' |
        sed -E 's/moon_export_headers\(//; s/\)//' | awk '{for (i = 2; i <= NF; i++) print $i}')
done
exports() {
    [ -z "${exported[$1]:-}" ] || printf '%s\n' "${exported[$1]}"
}

# check FOLDER "ALLOWED FOLDERS" NET [grep options]: FOLDER's includes of
# moonlet/ headers must be exported by one of the allowed folders; it includes
# no other folder's files, and no MPI or UCX header unless NET is 1.
check() {
    local folder=$1 allowed=$2 net=$3 hits h ok forbid
    shift 3
    [ -d "$folder" ] || return 0
    ok=$(for f in $allowed; do exports "$f"; done | sort -u)
    hits=$(grep -rEn "$@" '^[[:space:]]*#[[:space:]]*include[[:space:]]*"moonlet/' "$folder" 2>/dev/null || true)
    while IFS= read -r line; do
        [ -n "$line" ] || continue
        h=$(printf '%s\n' "$line" | sed -E 's/.*"moonlet\/([^"]+)".*/\1/')
        if ! printf '%s\n' "$ok" | grep -qxF "$h"; then
            echo "layering: $folder may include only headers of ($allowed): $line"
            bad=1
        fi
    done <<<"$hits"
    forbid='"(model|kvstore|scheduler|runtime|actors|launch)/'
    [ "$net" = 1 ] || forbid="<mpi\\.h>|<uc[pst]/|$forbid"
    hits=$(grep -rEn "$@" "^[[:space:]]*#[[:space:]]*include[[:space:]]*($forbid)" "$folder" 2>/dev/null || true)
    if [ -n "$hits" ]; then
        echo "layering: $folder must not include MPI, UCX or another folder's files:"
        echo "$hits"
        bad=1
    fi
}

check base      "base"                  0 --exclude-dir=gpu
check base/gpu  "base base/gpu"         0
check runtime   "base base/gpu runtime" 1
check model     "base base/gpu model"   0
check kvstore   "base kvstore"          0
check scheduler "base scheduler"        0

# The public headers themselves: each includes only what its owner may (the
# actors' ones, the serving and store APIs, anything below launch).
for lib in base base/gpu runtime model kvstore scheduler actors; do
    case $lib in
    base) allowed="base" ;;
    base/gpu) allowed="base base/gpu" ;;
    runtime | model) allowed="base base/gpu $lib" ;;
    actors) allowed="base base/gpu runtime model kvstore scheduler actors" ;;
    *) allowed="base $lib" ;;
    esac
    ok=$(for f in $allowed; do exports "$f"; done | sort -u)
    for h in $(exports "$lib"); do
        for inc in $(grep -oE '#[[:space:]]*include[[:space:]]*"moonlet/[^"]+"' "include/moonlet/$h" |
            sed -E 's/.*moonlet\/([^"]+)"/\1/'); do
            if ! printf '%s\n' "$ok" | grep -qxF "$inc"; then
                echo "layering: include/moonlet/$h ($lib) includes moonlet/$inc"
                bad=1
            fi
        done
    done
done

# A public header includes other public headers as "moonlet/x.h" only: it is
# installed without the folders a bare "x.h" would be found in.
hits=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' include/moonlet/*.h | grep -vE '"moonlet/' || true)
if [ -n "$hits" ]; then
    echo "layering: a public header includes a file that is not installed:"
    echo "$hits"
    bad=1
fi

# Every public header belongs to one library.
owned=$(for f in base base/gpu runtime model kvstore scheduler actors launch; do exports "$f"; done | sort)
for h in include/moonlet/*.h; do
    if ! printf '%s\n' "$owned" | grep -qxF "$(basename "$h")"; then
        echo "layering: $h belongs to no library (moon_export_headers)"
        bad=1
    fi
done
[ "$(printf '%s\n' "$owned" | uniq -d)" = "" ] || {
    echo "layering: exported twice: $(printf '%s\n' "$owned" | uniq -d | tr '\n' ' ')"
    bad=1
}

[ $bad = 0 ] && echo "layering: ok"
exit $bad
