#!/usr/bin/env bash
# mamba_ssm's selective-scan extension, built for benchmarks/gpu.py's comparison row (a developer tool: nothing in
# ssm_plugins uses it). mamba_ssm ships only an sdist on PyPI, whose setup.py fetches prebuilt wheels from GitHub
# and otherwise compiles every kernel for every architecture (tens of minutes); this builds the selective scan
# alone, float32 and bf16 inputs with real weights (the instantiations the benchmark calls), for one architecture,
# into DEST as an importable site folder: DEST/selective_scan_cuda*.so and DEST/mamba_ssm (its package __init__
# trimmed to the version, so that importing mamba_ssm.ops.selective_scan_interface pulls in no model code).
#
#   PY=python3 ARCH=9.0 DEST=.gpu_carry/site bash scripts/build_mamba_scan.sh   # then PYTHONPATH=DEST
#
# PY must be the Python and torch the extension will run under (the .so is tied to both); nvcc from CUDA_HOME.
# Measured 2026-11-27: 2 min 34 s and 2 min 52 s on 2 cores for sm_90 (CUDA 13.0, torch 2.11), a 20 MB .so.
set -eu
PY=${PY:-python3}
ARCH=${ARCH:-9.0}
VERSION=${VERSION:-2.3.2.post1}
DEST=$(realpath -m "${DEST:-.gpu_carry/site}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

url=$($PY - "$VERSION" <<'EOF'
import json, sys, urllib.request
files = json.load(urllib.request.urlopen("https://pypi.org/pypi/mamba-ssm/json"))["releases"][sys.argv[1]]
print(next(f["url"] for f in files if f["packagetype"] == "sdist"))
EOF
)
curl -sSfL "$url" | tar xz -C "$work"
src=$(echo "$work"/mamba_ssm-*)
mkdir -p "$work/build" "$DEST"
cp "$src"/csrc/selective_scan/* "$work/build/"
# Dispatch only what is compiled: inputs float32 / bf16 (no float16), weights float (no complex).
$PY - "$work/build/selective_scan.cpp" <<'EOF'
import re, sys
path = sys.argv[1]
text = open(path).read()
text, n_half = re.subn(r"if \(ITYPE == at::ScalarType::Half\) \{\s*\\\s*using input_t = at::Half;\s*\\\s*"
                       r"__VA_ARGS__\(\);\s*\\\s*\} else if \(ITYPE == at::ScalarType::BFloat16\)",
                       "if (ITYPE == at::ScalarType::BFloat16)", text)
text, n_complex = re.subn(r"\} else if \(WTYPE == at::ScalarType::ComplexFloat\) \{\s*\\\s*"
                          r"using weight_t = c10::complex<float>;\s*\\\s*__VA_ARGS__\(\);\s*\\\s*\} else \{",
                          "} else {", text)
if (n_half, n_complex) != (1, 1):
    sys.exit(f"build_mamba_scan: {path}: dispatch macros not as expected ({n_half}, {n_complex} matches)")
open(path, "w").write(text)
EOF
cat > "$work/build/setup.py" <<EOF
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension
flags = ["-O3", "-std=c++17", "-U__CUDA_NO_HALF_OPERATORS__", "-U__CUDA_NO_HALF_CONVERSIONS__",
         "-U__CUDA_NO_BFLOAT16_OPERATORS__", "-U__CUDA_NO_BFLOAT16_CONVERSIONS__", "-U__CUDA_NO_BFLOAT162_OPERATORS__",
         "-U__CUDA_NO_BFLOAT162_CONVERSIONS__", "--expt-relaxed-constexpr", "--expt-extended-lambda",
         "--use_fast_math", "-lineinfo"]  # mamba_ssm's own flags
setup(name="selective_scan_cuda", ext_modules=[CUDAExtension("selective_scan_cuda",
      ["selective_scan.cpp", "selective_scan_fwd_fp32.cu", "selective_scan_fwd_bf16.cu",
       "selective_scan_bwd_fp32_real.cu", "selective_scan_bwd_bf16_real.cu"],
      extra_compile_args={"cxx": ["-O3", "-std=c++17"], "nvcc": flags})],
      cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)})
EOF
(cd "$work/build" && TORCH_CUDA_ARCH_LIST=$ARCH $PY setup.py build_ext --inplace >"$work/build.log" 2>&1) ||
  { tail -40 "$work/build.log"; exit 1; }
cp "$work"/build/selective_scan_cuda*.so "$DEST/"
rm -rf "$DEST/mamba_ssm"
cp -r "$src/mamba_ssm" "$DEST/"
echo "__version__ = \"$VERSION\"  # trimmed by scripts/build_mamba_scan.sh: the selective scan only" \
  > "$DEST/mamba_ssm/__init__.py"
echo "built mamba_ssm $VERSION selective scan for sm_${ARCH/./} into $DEST"
