#!/usr/bin/env bash
# One GPU node, one command, at most 8 minutes of wall time: crossmod installed offline from a wheelhouse, then its GPU
# path measured, section by section, into bench/results/gpu_proof.json (bench/gpu_proof.py says what each section runs).
#   bash bench/gpu_proof.sh [WHEELHOUSE] [ARGS…]              on a GPU node
#   bash bench/gpu_proof.sh --cpu-smoke [WHEELHOUSE] [ARGS…]  the same script on CPU with the tiny configs (tests/test_gpu_proof.py)
# ARGS go to bench/gpu_proof.py (--only SECTION,…  --throughput-strategies …: a second lease reruns what the first could not).
# WHEELHOUSE: a folder made by `make wheelhouse BASE=<the node's pip list --format=freeze>` (docs/cluster.md), installed
# with no index into a temporary folder put first on PYTHONPATH; without one, the node's Python must hold crossmod's
# requirements already. PYTHON: the interpreter (default python3). GPU_PROOF_BUDGET_S: the whole wall time, install
# included (default 480). OUT: the result file (default bench/results/gpu_proof.json, smoke: bench/results/smoke/).
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=()
if [ "${1:-}" = "--cpu-smoke" ]; then smoke=(--cpu-smoke); shift; fi
wheelhouse=${1:-}
if [ $# -gt 0 ]; then shift; fi
python=${PYTHON:-python3}
start=$SECONDS
site_args=()
if [ -n "$wheelhouse" ]; then
  if [ ! -f "$wheelhouse/manifest.json" ]; then
    echo "gpu_proof: $wheelhouse is not a wheelhouse (no manifest.json): make one with make wheelhouse BASE=…" >&2
    exit 2
  fi
  site=$(mktemp -d -t crossmod-site.XXXXXX)
  trap 'rm -rf "$site"' EXIT
  "$python" -m pip install --quiet --no-index --no-deps --no-compile --target "$site" "$wheelhouse"/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  # what the sections import must be what was just installed, not a checkout or an older copy
  imported=$(cd / && "$python" -c "import crossmod; print(crossmod.__file__)")
  case "$imported" in
    "$site"/*) echo "gpu_proof: crossmod installed offline from $wheelhouse ($((SECONDS - start)) s)" ;;
    *) echo "gpu_proof: crossmod imports from $imported, not from the offline install in $site" >&2; exit 2 ;;
  esac
  site_args=(--site "$site")
fi
budget=$(( ${GPU_PROOF_BUDGET_S:-480} - (SECONDS - start) ))
out_args=()
if [ -n "${OUT:-}" ]; then out_args=(--out "$OUT"); fi
"$python" bench/gpu_proof.py "${smoke[@]}" --budget-s "$budget" "${site_args[@]}" "${out_args[@]}" "$@"
