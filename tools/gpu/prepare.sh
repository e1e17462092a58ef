#!/usr/bin/env bash
# Makes what the GPU-day calls carry (docs/gpu-day.md), in .gpu/ (git-ignored; never commit it):
#
#   .gpu/deps/    wheels every call installs: what thunder and its tests need and the device
#                 image lacks (optree, litgpt) or has in another version (pytest 9 and what it
#                 needs at that version: pluggy, iniconfig; pytest-xdist with execnet),
#                 and Liger-Kernel (the Triton benchmarks' reference); CPython 3.12, x86-64
#   .gpu/call1/   nvfuser.part-a: the first half of the nvfuser-cu130-torch210 wheel
#   .gpu/call2/   nvfuser.part-b and nvfuser.sha256 ("<sha256>  <wheel file name>")
#   .gpu/apex/    apex-src.tar.gz: apex trimmed to what building xentropy_cuda and
#                 fused_layer_norm_cuda needs (and apex-commit.txt)
#
#   bash tools/gpu/prepare.sh            # from the repository root; about 20 s with a PyPI mirror
#
# The nvFuser wheel (80 MB, 76.5 MiB) does not fit one call's 64 MiB carry, hence the two halves:
# call1 leaves part-a in /tmp/gpu-day on the device, call2 joins it with part-b there.
# apex comes from a git checkout of github.com/NVIDIA/apex: APEX_GIT (a checkout or bare git dir;
# default: the device tool's mirror /work/.mirror/NVIDIA+apex/repo, which the agent's `fetch`
# tool makes from github:NVIDIA/apex), else it is cloned (needs the network).
# Ends with the dry-run over the artefacts (tools/gpu/plan.py --dry-run --require-artefacts).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
py=${PYTHON:-python3}
dest=.gpu
NVFUSER=nvfuser-cu130-torch210==0.2.36.dev20260301
DEPS=(optree==0.20.0 litgpt==0.5.13 liger-kernel==0.8.5 pytest==9.2.0 pytest-xdist==3.8.0 pluggy==1.7.0 iniconfig==2.3.1 execnet==2.1.2)
platform=(--only-binary=:all: --python-version 3.12 --implementation cp
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)

rm -rf "$dest/deps" "$dest/call1" "$dest/call2" "$dest/apex"
mkdir -p "$dest/deps" "$dest/call1" "$dest/call2" "$dest/apex" "$dest/download"

echo "== dependency wheels" >&2
"$py" -m pip download -q --no-deps "${platform[@]}" -d "$dest/deps" "${DEPS[@]}"

echo "== $NVFUSER" >&2
"$py" -m pip download -q --no-deps "${platform[@]}" -d "$dest/download" "$NVFUSER"
wheel=$(ls "$dest"/download/nvfuser_cu130_torch210-*.whl | tail -n 1)
size=$(stat -c %s "$wheel")
half=$(((size + 1) / 2))
head -c "$half" "$wheel" >"$dest/call1/nvfuser.part-a"
tail -c +$((half + 1)) "$wheel" >"$dest/call2/nvfuser.part-b"
(cd "$dest/download" && sha256sum "$(basename "$wheel")") >"$dest/call2/nvfuser.sha256"
cat "$dest/call1/nvfuser.part-a" "$dest/call2/nvfuser.part-b" | cmp - "$wheel"  # the halves join back
echo "   $(basename "$wheel"): $size bytes, halves of $half and $((size - half))" >&2

echo "== apex sources (xentropy and fused layer norm only)" >&2
apex_git=${APEX_GIT:-/work/.mirror/NVIDIA+apex/repo}
if [ ! -d "$apex_git" ]; then
    apex_git=$dest/download/apex
    if ! git clone -q --depth 1 https://github.com/NVIDIA/apex "$apex_git"; then
        echo "   no apex sources (set APEX_GIT to a checkout of github.com/NVIDIA/apex): the apex call is not ready;" \
            "call1 and call2 are" >&2
        rm -rf "$dest/download"
        "$py" tools/gpu/plan.py --dry-run --require-artefacts --calls call1 call2
        exit
    fi
fi
# apex's Python package without apex/contrib (which holds dozens of other extensions), then the
# parts of contrib and csrc the two extensions need: compare tools/gpu/build_apex.py's list.
mapfile -t python_files < <(git --git-dir="$(git -C "$apex_git" rev-parse --absolute-git-dir)" ls-tree -r --name-only HEAD apex |
    grep -E '\.py$' | grep -v '^apex/contrib/')
git --git-dir="$(git -C "$apex_git" rev-parse --absolute-git-dir)" archive --format=tar.gz -o "$dest/apex/apex-src.tar.gz" HEAD \
    LICENSE "${python_files[@]}" apex/contrib/__init__.py apex/contrib/xentropy apex/contrib/csrc/xentropy \
    csrc/layer_norm_cuda.cpp csrc/layer_norm_cuda_kernel.cu csrc/type_shim.h csrc/static_switch.h
git -C "$apex_git" log -1 --format='%H %cd' >"$dest/apex/apex-commit.txt"
echo "   apex $(cut -c1-12 "$dest/apex/apex-commit.txt"): $(stat -c %s "$dest/apex/apex-src.tar.gz") bytes" >&2

rm -rf "$dest/download"
echo "== dry-run over the artefacts" >&2
"$py" tools/gpu/plan.py --dry-run --require-artefacts
