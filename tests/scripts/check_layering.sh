#!/usr/bin/env bash
# check_layering.sh SRC_DIR - fails when a library includes a layer above it
# (STYLE §1: runtime knows nothing of LLMs; model, kvstore and scheduler know
# nothing of actors, MPI or UCX; only actors/ and launch/ join them).
set -u
cd "${1:?usage: check_layering.sh SRC_DIR}"
ACTOR_API='moonlet/(actor|runtime|msg|sys_msgs|supervisor|transport|dist|moonlet)\.h|<mpi\.h>|<ucp/'
LLM_API='moonlet/(model|gguf|tokenizer|kv_[a-z_]*|engine|sampler|cost_model)\.h|"(model|kvstore|scheduler|actors)/'
bad=0
check() { # folder, forbidden-regex, what
    local hits
    hits=$(grep -rEn "^[[:space:]]*#[[:space:]]*include" "$1" 2>/dev/null | grep -E "$2" || true)
    if [ -n "$hits" ]; then
        echo "layering: $1 must not include $3:"; echo "$hits"; bad=1
    fi
}
check runtime   "$LLM_API" "model/kvstore/scheduler/actors headers"
check model     "$ACTOR_API" "the actor runtime, MPI or UCX"
check kvstore   "$ACTOR_API" "the actor runtime, MPI or UCX"
check scheduler "$ACTOR_API" "the actor runtime, MPI or UCX"
[ $bad = 0 ] && echo "layering: ok"
exit $bad
