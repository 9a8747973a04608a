#!/usr/bin/env bash
# Create or refresh .venv from the hash-locked requirements, then build ssm_plugins (with its _C extension).
# Idempotent: each phase is keyed by the content it depends on, so a warm re-run costs seconds.
#   - the stack is keyed by requirements/lock.txt and mmcv.txt (`make lock` writes them from requirements/*.in),
#     the Python version and STACK_RECIPE below;
#   - the mmcv wheel is cached outside the repo, keyed by mmcv/torch/Python versions and build flags
#     (pip's own wheel cache is keyed by the download only, so it would reuse a wheel built against
#     another torch);
#   - the package build is keyed by setup.py, pyproject.toml and ssm_plugins/csrc.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"

STACK_RECIPE=2   # bump when the install steps below change
PYTHON=${PYTHON:-python3.11}
venv="$root/.venv"
lock="$root/requirements/lock.txt"
mmcv_lock="$root/requirements/mmcv.txt"
cache="${SSM_PLUGINS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ssm_plugins}"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1

log() { printf '[env] %s\n' "$*" >&2; }
pin() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "$2"; }
hash_of() { cat "$@" | sha256sum | cut -c1-16; }

pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = "3.11" ] || { log "need Python 3.11 (PYTHON=$PYTHON is $pyver)"; exit 1; }

stack_key="$(printf '%s %s ' "$pyver" "$STACK_RECIPE"; hash_of "$lock" "$mmcv_lock")"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.stack-key" 2>/dev/null)" != "$stack_key" ]; then
  t0=$SECONDS
  log "building the toolbox stack in .venv from requirements/lock.txt (key $stack_key)"
  rm -rf "$venv"
  "$PYTHON" -m venv "$venv"
  # The lock holds every package of the environment, so nothing is resolved here: --no-deps, and every file is
  # checked against its hash.
  "$venv/bin/python" -m pip install --require-hashes --no-deps -r "$lock"

  # mmcv: compiled from the locked source distribution with its CPU ops, against the torch just installed (its
  # build imports torch, so no build isolation); reuse our keyed wheel. The one package not checked by hash at
  # install time: the wheel is ours, built from the hash-checked source.
  mmcv_v=$(pin mmcv "$mmcv_lock"); torch_v=$(pin torch "$lock")
  flags="MMCV_WITH_OPS=1 CFLAGS=-g0 CXXFLAGS=-g0"
  wheel_dir="$cache/wheels/mmcv-$mmcv_v-torch$torch_v-py$pyver-$(printf '%s' "$flags" | sha256sum | cut -c1-8)"
  if ! ls "$wheel_dir"/mmcv-*.whl >/dev/null 2>&1; then
    log "compiling mmcv $mmcv_v with CPU ops (about 10 min on 2 cores)"
    tmp="$wheel_dir.tmp.$$"; rm -rf "$tmp"; mkdir -p "$tmp"
    env MMCV_WITH_OPS=1 MAX_JOBS=2 CFLAGS=-g0 CXXFLAGS=-g0 FORCE_CUDA=0 \
      "$venv/bin/python" -m pip wheel --no-build-isolation --no-deps --no-cache-dir --require-hashes \
      --no-binary mmcv -w "$tmp" -r "$mmcv_lock"
    rm -rf "$wheel_dir"; mv "$tmp" "$wheel_dir"
  fi
  "$venv/bin/python" -m pip install --no-deps "$wheel_dir"/mmcv-*.whl
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

# The CUDA harness (tests/cuda_harness: the .cu kernels compiled for the host, which the suite runs on the CPU): built
# here like the extension, each object cached by its content outside the repo (1 min cold, 0.1 s warm)
"$venv/bin/python" tests/cuda_harness/harness.py >/dev/null || log "could not build the CUDA harness (its tests will build it or skip)"
