#!/usr/bin/env bash
# Make `import torch` work (CPU is enough) in the active interpreter, from PyPI only.
#
# Idempotent: does nothing when torch and numpy already import. Otherwise the wheels are fetched
# once into a wheel directory under ~/.cache and installed from there without the index, so a
# fresh virtualenv on the same machine installs offline.
#
#   PYTHON_BIN=.venv/bin/python tests/torch/install_torch.sh
#
# Environment:
#   PYTHON_BIN or PYTHON        interpreter to install into (default: python)
#   TORCH_VERSION               torch release (default: 2.15.0, the one tests/torch is checked against)
#   TRAINGUARD_WHEEL_DIR        wheel directory (default: ~/.cache/trainguard/wheels/torch-$TORCH_VERSION)
#   TRAINGUARD_TORCH_NO_TRITON  1: leave out triton (torch.compile only; saves ~285 MB download and
#                               ~1 GB on disk, but pip then reports torch's requirement as unmet)
set -euo pipefail

PYTHON="${PYTHON_BIN:-${PYTHON:-python}}"
TORCH_VERSION="${TORCH_VERSION:-2.15.0}"
WHEELS="${TRAINGUARD_WHEEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trainguard/wheels/torch-$TORCH_VERSION}"
NO_TRITON="${TRAINGUARD_TORCH_NO_TRITON:-0}"

if "$PYTHON" - <<PY 2>/dev/null; then
import numpy, torch
assert torch.__version__.split("+")[0] == "$TORCH_VERSION", torch.__version__
PY
    echo "install_torch: torch $TORCH_VERSION already importable in $("$PYTHON" -c 'import sys; print(sys.executable)'): skipped"
    exit 0
fi

mkdir -p "$WHEELS"
start=$(date +%s)
pip_() { "$PYTHON" -m pip --disable-pip-version-check "$@"; }

if [ "$NO_TRITON" = 1 ]; then
    # torch without its dependencies, then every requirement it declares except triton. The nvidia-*
    # wheels cannot be left out: libtorch_cpu.so and libtorch_cuda.so link against them (NEEDED), so
    # `import torch` fails without them even on a machine with no GPU.
    pip_ install --no-index --find-links "$WHEELS" --no-deps "torch==$TORCH_VERSION" 2>/dev/null ||
        { pip_ download --quiet --no-deps --dest "$WHEELS" "torch==$TORCH_VERSION" &&
          pip_ install --no-index --find-links "$WHEELS" --no-deps "torch==$TORCH_VERSION"; }
    reqs="$WHEELS/requirements-no-triton.txt"
    "$PYTHON" - "$reqs" <<'PY'
import importlib.metadata, sys
reqs = [r for r in importlib.metadata.requires("torch") or [] if not r.startswith("triton") and "extra ==" not in r]
open(sys.argv[1], "w").write("\n".join(reqs + ["numpy"]) + "\n")
PY
    pip_ install --no-index --find-links "$WHEELS" -r "$reqs" 2>/dev/null ||
        { pip_ download --quiet --dest "$WHEELS" -r "$reqs" &&
          pip_ install --no-index --find-links "$WHEELS" -r "$reqs"; }
else
    # Offline from the wheel directory when it is complete; otherwise fill it from PyPI first.
    pip_ install --no-index --find-links "$WHEELS" "torch==$TORCH_VERSION" numpy 2>/dev/null ||
        { pip_ download --quiet --dest "$WHEELS" "torch==$TORCH_VERSION" numpy &&
          pip_ install --no-index --find-links "$WHEELS" "torch==$TORCH_VERSION" numpy; }
fi

"$PYTHON" -W error -c 'import torch, torch.distributed.run; print("install_torch: torch", torch.__version__)'
echo "install_torch: done in $(( $(date +%s) - start )) s; wheels in $WHEELS ($(du -sh "$WHEELS" | cut -f1))"
