#!/usr/bin/env bash
# Installs, without network, what a GPU-day call needs into WORK/site (on sys.path through
# PYTHONPATH, ahead of the device's own packages):
#
#   bash tools/gpu/install.sh WORK [--stash PART_A]            # call1: keep the wheel's first half
#   bash tools/gpu/install.sh WORK --join PART_B SHA256_FILE   # call2's nvfuser_join stage
#
# The carried dependency wheels (.gpu/deps: optree, litgpt, liger-kernel, pytest 9, ...) and the
# thunder packages of this checkout, built here from source with the device's setuptools
# (--no-build-isolation), all --no-deps: the device's torch 2.11, triton and the rest stay.
# --join puts the first half (left in WORK by call1) and PART_B together, checks the result
# against SHA256_FILE ("<sha256>  <wheel file name>", written by prepare.sh) and installs it.
# PYTHON (default python3) is the interpreter to install for; GPU_DAY_DEPS (default .gpu/deps)
# the folder of dependency wheels (a CPU rehearsal points them at its own).
set -euo pipefail
py=${PYTHON:-python3}
deps=${GPU_DAY_DEPS:-.gpu/deps}
work=${1:?WORK folder}
shift
site=$work/site
mkdir -p "$site" "$work/wheels"
pip_install() {
    "$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$@"
}
case "${1:-}" in
--join)
    part_b=${2:?PART_B}
    sums=${3:?SHA256_FILE}
    if [ ! -f "$work/nvfuser.part-a" ]; then
        echo "install.sh: $work/nvfuser.part-a is missing: call1 did not run on this machine (not the warm one?)" >&2
        exit 3
    fi
    wheel=$(awk '{print $2}' "$sums")
    cat "$work/nvfuser.part-a" "$part_b" >"$work/wheels/$wheel"
    (cd "$work/wheels" && sha256sum -c "$OLDPWD/$sums")
    pip_install "$work/wheels/$wheel"
    "$py" -m pip list --path "$site" 2>/dev/null | grep -i nvfuser || true
    exit 0
    ;;
--stash)
    cp "${2:?PART_A}" "$work/nvfuser.part-a"
    ;;
"") ;;
*)
    echo "install.sh: unknown option $1" >&2
    exit 2
    ;;
esac
pip_install "$deps"/*.whl
pip_install --no-build-isolation packages/thunder-core packages/thunder-triton packages/thunder-nvfuser packages/thunder-apex
PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" "$py" - <<'PY'
import importlib.metadata as md

import torch

import thunder

names = ["thunder-core", "thunder-triton", "thunder-nvfuser", "thunder-apex", "litgpt", "liger-kernel", "optree", "pytest", "pluggy", "pytest-xdist"]
print({n: md.version(n) for n in names}, "torch", torch.__version__, "thunder from", thunder.__file__)
PY
