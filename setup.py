"""Builds ssm_plugins._C: C++ CPU kernels always, CUDA kernels when nvcc and a CUDA build of torch exist.

Layout of ssm_plugins/csrc: per op, ``<op>.cpp`` (schema, CPU kernel, CUDA glue under WITH_CUDA; the
larger ops split their CPU kernels into ``<op>_fwd.cpp`` / ``<op>_bwd.cpp``, see ssm_plugins/csrc/README.md)
and ``cuda/<op>.cu`` with the kernels and plain launchers. Every ``csrc/*.cpp`` is compiled. The .cu files
include no torch headers, which keeps each of them to seconds of nvcc time.
"""
import glob
import os

from setuptools import setup
from torch.utils.cpp_extension import CUDA_HOME, BuildExtension, CppExtension, CUDAExtension
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
CSRC = os.path.join("ssm_plugins", "csrc")


def want_cuda() -> bool:
    if os.environ.get("SSM_PLUGINS_CUDA", "auto") == "0":
        return False
    nvcc = CUDA_HOME and os.path.exists(os.path.join(CUDA_HOME, "bin", "nvcc"))
    return bool(torch.version.cuda and nvcc)


def extension():
    cpp = sorted(glob.glob(os.path.join(CSRC, "*.cpp")))
    cxx = ["-O3", "-fopenmp", "-g0"]
    kwargs = dict(name="ssm_plugins._C", include_dirs=[os.path.join(HERE, CSRC)], extra_link_args=["-fopenmp"])
    if want_cuda():
        cu = sorted(glob.glob(os.path.join(CSRC, "cuda", "*.cu")))
        # -ftz=true (as mamba_ssm's --use_fast_math, without its approximate division and square root): float32
        # denormals flush to zero, so a decay's exp2 is one MUFU.EX2 instead of four instructions with the fix-up
        # for results below 2^-126 (scripts/sass_loops.py mirrors these flags)
        nvcc = ["-O3", "-lineinfo", "--expt-relaxed-constexpr", "-std=c++17", "-ftz=true"]
        # Not code generation: nvcc compiles the -gencode targets (TORCH_CUDA_ARCH_LIST, two by default) of one
        # file in parallel threads. selective_scan.cu alone was the build's critical path (its two architectures
        # one after the other, while the second ninja job had run out of files).
        threads = [f"--threads={os.environ.get('SSM_PLUGINS_NVCC_THREADS', '2')}"]
        return CUDAExtension(sources=cpp + cu, define_macros=[("WITH_CUDA", None)],
                             extra_compile_args={"cxx": cxx, "nvcc": nvcc + threads}, **kwargs)
    return CppExtension(sources=cpp, extra_compile_args={"cxx": cxx}, **kwargs)


setup(ext_modules=[extension()], cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)})
