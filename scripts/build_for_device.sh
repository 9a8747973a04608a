#!/usr/bin/env bash
# Prepares, on this machine, what scripts/gpu_check.sh uses on a GPU machine whose Python differs from ours (the
# lent machines run Python 3.12 + torch 2.11.0+cu130; .venv is 3.11): a side venv with that Python and torch
# (no CUDA libraries: .venv's nvidia wheels serve the build), then in .gpu_carry/
#   _C<suffix>.so + _C.key     this checkout's extension for ARCH, with the source key gpu_check.sh compares
#   site/                      mamba_ssm's selective scan (scripts/build_mamba_scan.sh), unless MAMBA=0
# and in .whl/ the timm and einops wheels of requirements/lock.txt. Carry .gpu_carry and .whl with the call.
# Measured 2026-11-27 on the project's 2 cores: about 3 min for _C, 3 min for mamba_ssm, plus the downloads.
#
#   PYTHON=python3.12 ARCH=9.0 bash scripts/build_for_device.sh
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-$(command -v python3.12 || echo "$HOME/.pyenv/versions/3.12.1/bin/python")}
ARCH=${ARCH:-9.0}
SIDE=${SIDE:-/tmp/ssm_plugins_device_venv}
nvidia=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/nvidia
pin() { grep -E "^$1==" requirements/lock.txt | head -1 | cut -d' ' -f1; }

if [ ! -x "$SIDE/bin/python" ]; then
  "$PYTHON" -m venv "$SIDE"
  "$SIDE/bin/pip" install -q --no-deps "$(pin torch)" setuptools ninja packaging numpy typing_extensions filelock \
    sympy mpmath jinja2 markupsafe networkx fsspec
fi
# torch's CUDA build loads cuDNN & co. at import: from .venv's nvidia wheels; its headers include cusparse/cublas
export LD_LIBRARY_PATH=$(find "$nvidia" -name "lib*.so*" -printf '%h\n' | sort -u | paste -sd:)
export CPATH="$nvidia/cu13/include${CPATH:+:$CPATH}" CUDA_HOME=${CUDA_HOME:-/usr/local/cuda} MAX_JOBS=${MAX_JOBS:-2}

mkdir -p .gpu_carry .whl
build=$(mktemp -d)
trap 'rm -rf "$build"' EXIT
git ls-files -z setup.py pyproject.toml ssm_plugins | xargs -0 cp --parents -t "$build"
(cd "$build" && TORCH_CUDA_ARCH_LIST=$ARCH "$SIDE/bin/python" setup.py build_ext --inplace >build.log 2>&1) ||
  { tail -40 "$build/build.log"; exit 1; }
cp "$build"/ssm_plugins/_C.*.so .gpu_carry/
bash scripts/source_key.sh "$build" > .gpu_carry/_C.key
echo "built .gpu_carry/$(basename "$build"/ssm_plugins/_C.*.so) for sm_${ARCH/./}, key $(cat .gpu_carry/_C.key)"

.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 -d .whl \
  "$(pin timm)" "$(pin einops)"
if [ "${MAMBA:-1}" != 0 ]; then
  PY="$SIDE/bin/python" ARCH=$ARCH DEST=.gpu_carry/site bash scripts/build_mamba_scan.sh
fi
