#!/usr/bin/env bash
# The GPU checks in one call, for a machine with a CUDA device and its own python3 + torch (a lent GPU machine,
# a cloud instance): build _C for the card, run every gpu-marked test, run benchmarks/gpu.py. Logs go to $OUT.
#
#   OUT=/tmp/gpu bash scripts/gpu_check.sh   # STEPS="build tests bench profile sanitize ncu compile": these
#                                             # (default); "bench_compiled" adds the compiled throughput rows,
#                                             # "bench_qs_scan" vim2_t/viqs_t with qs_mix's scan kernels
#
# Optional inputs, for machines that cannot reach a package index (scripts/build_for_device.sh makes all three):
#   .whl/*.whl                 wheels installed into /tmp/site first (e.g. the timm this project pins)
#   .gpu_carry/site/           put on PYTHONPATH (e.g. mamba_ssm's selective scan from scripts/build_mamba_scan.sh:
#                              benchmarks/gpu.py then adds its selective_scan_fn row)
#   .gpu_carry/_C<suffix>.so   a prebuilt extension, used when .gpu_carry/_C.key equals this checkout's source key
#                              (scripts/source_key.sh, printed below) and it imports
set -u
OUT=${OUT:-/tmp/gpu_check}
PY=${PY:-python3}
STEPS=${STEPS:-build tests bench profile sanitize ncu compile}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
step() { echo; echo "== $1 ($(date -u +%H:%M:%S))"; }

step setup
if compgen -G ".whl/*.whl" >/dev/null; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl ||
    exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
[ -d .gpu_carry/site ] && export PYTHONPATH=$PWD/.gpu_carry/site${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH=$PWD:$PYTHONPATH  # this checkout's ssm_plugins, for the scripts under scripts/
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee "$OUT/gpu.txt"
$PY -c "import torch, timm; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'timm', timm.__version__,
'device', torch.cuda.get_device_name(0))" || exit 1

if [[ " $STEPS " == *" build "* ]]; then
  step build
  t0=$SECONDS
  key=$(bash scripts/source_key.sh)
  suffix=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  echo "source key $key"
  if [ -f ".gpu_carry/_C$suffix" ] && [ "$(cat .gpu_carry/_C.key 2>/dev/null)" = "$key" ] &&
     cp ".gpu_carry/_C$suffix" "ssm_plugins/_C$suffix" && $PY -c "import ssm_plugins._C"; then
    echo "prebuilt .gpu_carry/_C$suffix"
  else
    rm -f "ssm_plugins/_C$suffix"
    cap=$($PY -c "import torch; print('%d.%d' % torch.cuda.get_device_capability())")
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-$cap} MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      $PY setup.py build_ext --inplace > "$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
    echo "built for sm_$cap"
  fi
  echo "build step: $((SECONDS - t0)) s"
fi
$PY -c "from ssm_plugins.ops import _backend; print(_backend.backend_info())" || exit 1

# Every gpu-marked test but the inductor ones (step compile) and the quick benchmark (step bench runs the full one)
if [[ " $STEPS " == *" tests "* ]]; then
  step tests
  timeout ${TESTS_TIMEOUT:-240} $PY -m pytest -m gpu -p no:cacheprovider -q -rfE --durations=10 \
    --junitxml="$OUT/junit.xml" tests/ops tests/models/test_cuda_models.py \
    -k "not inductor and not quick_run and not profile_on" 2>&1 | tee "$OUT/pytest.log" | tail -60
  echo "tests exit: ${PIPESTATUS[0]}"
fi

if [[ " $STEPS " == *" bench "* ]]; then
  step bench
  timeout ${BENCH_TIMEOUT:-240} $PY -m benchmarks.gpu --write-readme ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
  echo "bench exit: ${PIPESTATUS[0]}"
  cp benchmarks/README.md "$OUT/benchmarks_README.md"
fi

# The models under torch.compile (CUDA graphs: the eager step's Python/launch time gone), eager rows beside them
if [[ " $STEPS " == *" bench_compiled "* ]]; then
  step bench_compiled
  TORCHINDUCTOR_COMPILE_THREADS=1 timeout ${BENCH_COMPILED_TIMEOUT:-420} $PY -m benchmarks.gpu --only models \
    --compile ${COMPILE_MODE:-reduce-overhead} \
    --models ${COMPILED_MODELS:-deit_small_patch16_224 swin_tiny_patch4_window7_224 vim2_t viqs_t} \
    2>&1 | tee "$OUT/bench_compiled.log"
  echo "bench_compiled exit: ${PIPESTATUS[0]}"
fi

# The QS models with qs_mix's scan kernels instead of its chunked form (the default on CUDA for scalar A): the A/B
# of that choice, eager, and compiled too when bench_compiled is asked for
if [[ " $STEPS " == *" bench_qs_scan "* ]]; then
  step bench_qs_scan
  compiled=""
  [[ " $STEPS " == *" bench_compiled "* ]] && compiled="--compile ${COMPILE_MODE:-reduce-overhead}"
  SSM_PLUGINS_QS=scan TORCHINDUCTOR_COMPILE_THREADS=1 timeout ${BENCH_QS_TIMEOUT:-300} $PY -m benchmarks.gpu \
    --only models --models vim2_t viqs_t $compiled 2>&1 | tee "$OUT/bench_qs_scan.log"
  echo "bench_qs_scan exit: ${PIPESTATUS[0]}"
fi

if [[ " $STEPS " == *" profile "* ]]; then
  step profile
  timeout ${PROFILE_TIMEOUT:-150} $PY -m benchmarks.gpu_profile ${PROFILE_ARGS:-} > "$OUT/profile.log" 2>&1
  echo "profile exit: $?"
  grep -A40 "## selective scan" "$OUT/profile.log"
fi

# compute-sanitizer over every kernel on small odd shapes (scripts/gpu_sanitize.py); errors make it exit non-zero
if [[ " $STEPS " == *" sanitize "* ]]; then
  for tool in memcheck racecheck; do
    step "sanitize $tool"
    timeout ${SANITIZE_TIMEOUT:-100} compute-sanitizer --tool $tool --error-exitcode 9 --print-limit 20 \
      $PY scripts/gpu_sanitize.py > "$OUT/sanitize_$tool.log" 2>&1
    echo "sanitize $tool exit: $?"
    grep -v "^========= *$" "$OUT/sanitize_$tool.log" | tail -12
  done
fi

# Nsight Compute on the scan kernels at the models' shapes (scripts/gpu_ncu.py); the clocks left as they are
if [[ " $STEPS " == *" ncu "* ]]; then
  step ncu
  timeout ${NCU_TIMEOUT:-120} ncu --clock-control none -k regex:"fwd_kernel|bwd_kernel" -c 12 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis $PY scripts/gpu_ncu.py > "$OUT/ncu.txt" 2>&1
  echo "ncu exit: $?"
  grep -E "^  [a-z_:<>(),0-9 ]*kernel|Duration|Registers Per|Achieved Occupancy|Memory Throughput|Compute \(SM\)" \
    "$OUT/ncu.txt" | head -80
fi

# inductor's compile workers are subprocesses that can keep the interpreter from exiting: compile in-process
if [[ " $STEPS " == *" compile "* ]]; then
  step compile
  TORCHINDUCTOR_COMPILE_THREADS=1 timeout ${COMPILE_TIMEOUT:-150} $PY -m pytest -m gpu -p no:cacheprovider -q -rfE \
    --durations=5 tests/models/test_cuda_models.py -k inductor 2>&1 | tee "$OUT/compile.log" | tail -15
  echo "compile exit: ${PIPESTATUS[0]}"
fi
step done
