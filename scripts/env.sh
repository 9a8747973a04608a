#!/usr/bin/env bash
# Create or refresh .venv from requirements/stack.txt, then build ssm_plugins (with its _C extension).
# Idempotent: each phase is keyed by the content it depends on, so a warm re-run costs seconds.
#   - the stack is keyed by requirements/stack.txt, the Python version and STACK_RECIPE below;
#   - the mmcv wheel is cached outside the repo, keyed by mmcv/torch/Python versions and build flags
#     (pip's own wheel cache is keyed by the download only, so it would reuse a wheel built against
#     another torch);
#   - the package build is keyed by setup.py, pyproject.toml and ssm_plugins/csrc.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

STACK_RECIPE=1   # bump when the install steps below change
PYTHON=${PYTHON:-python3.11}
venv="$root/.venv"
stack="$root/requirements/stack.txt"
cache="${SSM_PLUGINS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ssm_plugins}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

log() { printf '[env] %s\n' "$*" >&2; }
pin() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "$stack"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = "3.11" ] || { log "need Python 3.11 (PYTHON=$PYTHON is $pyver)"; exit 1; }

stack_key="$(printf '%s %s ' "$pyver" "$STACK_RECIPE"; hash_of "$stack")"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stack-key" 2>/dev/null)" != "$stack_key" ]; then
  t0=$SECONDS
  log "building the toolbox stack in .venv (key $stack_key)"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install -c "$stack")
  "${pip[@]}" setuptools wheel ninja packaging numpy
  "${pip[@]}" torch torchvision torchaudio

  # mmcv: from source with its CPU ops, against the torch just installed; reuse our keyed wheel.
  mmcv_v=$(pin mmcv); torch_v=$(pin torch)
  flags="MMCV_WITH_OPS=1 CFLAGS=-g0 CXXFLAGS=-g0"
  wheel_dir="$cache/wheels/mmcv-$mmcv_v-torch$torch_v-py$pyver-$(printf '%s' "$flags" | sha256sum | cut -c1-8)"
  if ! ls "$wheel_dir"/mmcv-*.whl >/dev/null 2>&1; then
    log "compiling mmcv $mmcv_v with CPU ops (about 12 min on 2 cores)"
    tmp="$wheel_dir.tmp.$$"; rm -rf "$tmp"; mkdir -p "$tmp"
    "$venv/bin/python" -m pip install -c "$stack" addict yapf pyyaml pillow opencv-python mmengine
    env MMCV_WITH_OPS=1 MAX_JOBS=2 CFLAGS=-g0 CXXFLAGS=-g0 FORCE_CUDA=0 \
      "$venv/bin/python" -m pip wheel --no-build-isolation --no-deps --no-cache-dir \
      -w "$tmp" "mmcv==$mmcv_v"
    rm -rf "$wheel_dir"; mv "$tmp" "$wheel_dir"
  fi
  "$venv/bin/python" -m pip install --no-deps "$wheel_dir"/mmcv-*.whl

  "${pip[@]}" mmengine mmcv mmdet mmsegmentation mmpretrain einops mat4py modelindex importlib_metadata ftfy regex timm speechbrain soundfile \
    scipy scikit-learn pandas opencv-python pytest pytest-xdist fast_bss_eval onnx onnxscript onnxruntime \
    click colorama model-index requests rich tabulate
  # openmim's declared dependencies downgrade half the stack; its real imports are installed above
  "$venv/bin/python" -m pip install --no-deps -c "$stack" openmim
  printf '%s' "$stack_key" > "$venv/.stack-key"
  rm -f "$venv/.package-key"
  log "stack ready in $((SECONDS - t0)) s"
fi

# The package and its compiled extension. CUDA sources compile whenever nvcc and a CUDA torch exist.
pkg_key="$(cat "$venv/.stack-key") $(find setup.py pyproject.toml ssm_plugins/csrc -type f | sort | xargs cat | sha256sum | cut -c1-16)"
if [ "$(cat "$venv/.package-key" 2>/dev/null)" != "$pkg_key" ]; then
  t0=$SECONDS
  log "building ssm_plugins and its _C extension"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  if [ -z "${CUDA_HOME:-}" ] && [ -x /usr/local/cuda/bin/nvcc ]; then export CUDA_HOME=/usr/local/cuda; fi
  # torch's CUDA headers include cusparse/cublas headers that ship in the nvidia wheels, not in CUDA_HOME
  if [ -d "$site/nvidia/cu13/include" ]; then export CPATH="$site/nvidia/cu13/include${CPATH:+:$CPATH}"; fi
  export TORCH_CUDA_ARCH_LIST="${TORCH_CUDA_ARCH_LIST:-8.0;9.0}" MAX_JOBS="${MAX_JOBS:-2}"
  "$venv/bin/python" -m pip install --no-build-isolation --no-deps -e .
  printf '%s' "$pkg_key" > "$venv/.package-key"
  log "package built in $((SECONDS - t0)) s"
fi

# timm's own model tests (tests/timm_suite runs them against our models): the pinned sdist's tests/, cached
# outside the repo like the mmcv wheel; a no-op once cached
"$venv/bin/python" scripts/timm_test_suite.py fetch >/dev/null || log "could not fetch timm's sdist tests (tests/timm_suite will skip)"
