#!/usr/bin/env bash
# The GPU checks of thunder-nvfuser on an offline machine with an NVIDIA GPU, a CUDA build of torch
# and CPython 3.12 (where the wheels exist), from the repository root:
#
#   bash packages/thunder-nvfuser/tools/gpu_session.sh STAGE WHEEL...
#
# WHEEL...: the wheels to install first with pip --target (nvfuser-cu130-torch210, litgpt==0.5.13,
# jsonargparse, optree: what the machine lacks), none for a later stage on the same machine.
# STAGE: import   does nvfuser_direct load against this torch, and run a tiny fusion?
#        tests    the cuda-marked tests except the OpInfo sweep (LLaMAMLP, LitGPT, rematerialisation)
#        opinfo   the OpInfo values-and-grads sweep through nvFuser (long: run it alone)
#        bench    benchmarks/nvfuser_llama.py (one JSON object)
# Logs go to $OUT (or /tmp/thunder-nvfuser-gpu). THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH=1 is set, so a
# wheel built for another torch (torch 2.10's on torch 2.11) is tried: only whether it loads decides.
set -u
stage=${1:?stage: import, tests, opinfo or bench}
shift
out=${OUT:-/tmp/thunder-nvfuser-gpu}
site=/tmp/thunder-nvfuser-site
mkdir -p "$out" "$site"
if [ $# -gt 0 ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "$@" || exit 1
fi
export PYTHONPATH="$site:$PWD/packages/thunder-core/src:$PWD/packages/thunder-nvfuser/src"
export PYTHONUNBUFFERED=1 THUNDER_NVFUSER_ALLOW_TORCH_MISMATCH=1
set -o pipefail

case "$stage" in
import)
    python3 - <<'EOF' 2>&1 | tee "$out/import.log"
import json, torch
from thunder_nvfuser import runtime

report = {
    "torch": torch.__version__, "cuda": torch.version.cuda,
    "device": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    "module": runtime.installed_module(), "distribution": runtime.installed_distribution(),
}
try:
    nv = runtime.import_nvfuser()
    report["nvfuser_version"] = str(nv.__version__)
    with nv.FusionDefinition() as fd:
        a = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nv.DataType.Float)
        b = fd.define_tensor(shape=[-1, -1], contiguity=[True, True], dtype=nv.DataType.Float)
        fd.add_output(fd.ops.exp(fd.ops.add(a, b)))
    x, y = torch.randn(4, 8, device="cuda"), torch.randn(4, 8, device="cuda")
    (z,) = fd.execute([x, y])
    report["tiny_fusion_matches_eager"] = bool(torch.allclose(z, (x + y).exp()))
except Exception as e:  # the answer to "does it load against this torch": say exactly why not
    report["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(report, indent=1))
EOF
    ;;
tests)
    timeout 560 python3 -m pytest packages/thunder-nvfuser/tests -q -p no:cacheprovider -rs \
        -k "not test_opinfo_values_and_grads" 2>&1 | tee "$out/tests.log"
    ;;
opinfo)
    timeout 570 python3 -m pytest packages/thunder-nvfuser/tests/test_gpu.py -q -p no:cacheprovider -n 8 \
        -k "test_opinfo_values_and_grads" 2>&1 | tail -n 200 | tee "$out/opinfo.log"
    ;;
bench)
    # shellcheck disable=SC2086  # BENCH_ARGS: extra arguments, e.g. "--cases llama --layers 4"
    timeout 570 python3 benchmarks/nvfuser_llama.py ${BENCH_ARGS:-} >"$out/bench.json" 2>"$out/bench.log"
    cat "$out/bench.json"
    ;;
*)
    echo "unknown stage $stage" >&2
    exit 2
    ;;
esac
