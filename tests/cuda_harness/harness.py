"""Build and call the host-side CUDA harness: ssm_plugins/csrc/cuda/*.cu compiled with the host C++ compiler.

``build()`` compiles every ``.cu`` (as C++20, with ``cuda_harness.h`` force-included and ``shim/`` first on the
include path, so ``<cuda_runtime.h>`` is the harness) plus ``api.cpp`` into one shared library, caching each
object by the hash of its text, the headers, the flags and the compiler (a warm call only hashes; editing one
``.cu`` recompiles that one). ``build(replace={"essm.cu": text})`` builds a variant with one source swapped,
which is how the tests plant bugs. ``Harness`` loads a library with ctypes and exposes the raw ops with the
same arguments and results as ``torch.ops.ssm_plugins.<op>`` on CPU tensors: it allocates outputs and scratch
like the CUDA glue in ``ssm_plugins/csrc/<op>.cpp`` (outputs that the glue leaves uninitialised are filled
with NaN), registers every tensor's storage as an allocation the bounds-checked pointers may reach, and
raises ``HarnessError`` with the launcher's message when a kernel fails (an illegal address included).
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from ssm_plugins.ops.selective_scan import saved_states

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CUDA_SRC = ROOT / "ssm_plugins" / "csrc" / "cuda"
LINK_VERSION = "2"  # bump when the link command changes
FLAGS = ["-std=c++20", "-O1", "-g0", "-fPIC", "-pthread", "-w"]
DTYPE_CODE = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3, torch.complex64: 4,
              torch.complex128: 5}


class HarnessError(RuntimeError):
    """A kernel launch through the harness failed (the launcher's exception text)."""


def cuda_include() -> Path | None:
    """A directory with the CUDA headers the harness uses (cuda_fp16.h, cuda_bf16.h, the runtime's types)."""
    nvcc = shutil.which("nvcc")
    candidates = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
                  nvcc and str(Path(nvcc).resolve().parents[1])]
    for base in filter(None, candidates):
        inc = Path(base) / "include"
        if (inc / "cuda_fp16.h").exists() and (inc / "cuda_runtime_api.h").exists():
            return inc
    return None


def compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "g++"))


def unavailable_reason() -> str | None:
    """Why the harness cannot be built here (None if it can)."""
    if compiler() is None:
        return "no host C++ compiler (g++ or $CXX)"
    if cuda_include() is None:
        return "no CUDA headers (cuda_fp16.h, cuda_runtime_api.h) under $CUDA_HOME or /usr/local/cuda"
    return None


def cache_dir() -> Path:
    """$SSM_CUDA_HARNESS_CACHE, else ~/.cache/ssm_plugins/cuda_harness, else (not writable) one under /tmp."""
    default = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ssm_plugins" / "cuda_harness"
    path = Path(os.environ.get("SSM_CUDA_HARNESS_CACHE", default))
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        path = Path(tempfile.gettempdir()) / f"ssm_plugins_cuda_harness_{os.getuid()}"
        path.mkdir(parents=True, exist_ok=True)
    return path


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()[:24]


def _headers_text() -> str:
    files = sorted(CUDA_SRC.glob("*.h")) + [HERE / "cuda_harness.h", HERE / "shim" / "cuda_runtime.h"]
    return "".join(f"{p.name}\n{p.read_text()}" for p in files)


def _compile(cxx: str, text: str, suffix: str, out: Path, key: str, extra: list[str]) -> None:
    """Compile one source text to `out` (atomically: concurrent test processes may build the same object)."""
    work = out.parent / f"{key}-{os.getpid()}"  # no dot: with_suffix below must keep the pid
    src = work.with_suffix(suffix)
    src.write_text(text)
    inc = cuda_include()
    cmd = [cxx, *FLAGS, f"-I{HERE / 'shim'}", f"-I{HERE}", f"-I{CUDA_SRC}", f"-I{inc}", *extra, "-c", str(src),
           "-o", str(work.with_suffix(".o"))]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    src.unlink()
    if proc.returncode != 0:
        raise HarnessError(f"harness compile failed: {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    os.replace(work.with_suffix(".o"), out)


def build(replace: dict[str, str] | None = None, extra: tuple[str, ...] = (), verbose: bool = False) -> Path:
    """The harness library for the current sources (with `replace`'s .cu texts swapped in, and the .cu files
    `extra` of this folder added, e.g. selftest.cu); cached."""
    reason = unavailable_reason()
    if reason:
        raise HarnessError(f"cannot build the CUDA harness: {reason}")
    cxx = compiler()
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
    sources = {p.name: p.read_text() for p in sorted(CUDA_SRC.glob("*.cu"))}
    unknown = set(replace or {}) - set(sources)
    if unknown:
        raise ValueError(f"replace names unknown sources: {sorted(unknown)}")
    sources.update(replace or {})
    base = _digest(version, " ".join(FLAGS), _headers_text())
    objs = cache_dir() / "objs"
    objs.mkdir(parents=True, exist_ok=True)
    sources.update({name: (HERE / name).read_text() for name in extra})
    units = [(name, text, ".cu.cpp", ["-include", "cuda_harness.h"]) for name, text in sources.items()]
    units.append(("api.cpp", (HERE / "api.cpp").read_text(), ".cpp", []))
    def compiled(unit) -> Path:
        name, text, suffix, flags = unit
        key = _digest(base, name, text)
        out = objs / f"{Path(name).stem}-{key}.o"
        if out.exists():
            return out
        # One compile per object across processes: xdist's workers start on the same cold cache together, and
        # the second waits here for the first's object instead of compiling it again.
        with open(objs / f"{Path(name).stem}-{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not out.exists():
                start = time.perf_counter()
                _compile(cxx, text, suffix, out, key, flags)
                if verbose:
                    print(f"cuda_harness: compiled {name} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
        return out

    # the units compile in parallel (selective_scan.cu alone is half of a cold build)
    with concurrent.futures.ThreadPoolExecutor(max(1, min(len(units), os.cpu_count() or 1))) as pool:
        paths = list(pool.map(compiled, units))
    lib = cache_dir() / f"libssm_cuda_harness-{_digest(LINK_VERSION, *(p.name for p in paths))}.so"
    if not lib.exists():
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=lib.parent)
        os.close(fd)
        # -Bsymbolic: the kernels call this library's cudaGetLastError, not the CUDA runtime that torch loaded.
        proc = subprocess.run([cxx, "-shared", "-pthread", "-Wl,-Bsymbolic", *map(str, paths), "-o", tmp], capture_output=True,
                              text=True)
        if proc.returncode != 0:
            raise HarnessError(f"harness link failed:\n{proc.stderr[-4000:]}")
        os.replace(tmp, lib)
    return lib


# ---- ctypes mirror of the launchers' argument structs (ssm_plugins/csrc/cuda/qs_mix.h) ----------------------
_i64 = ctypes.c_int64
_ptr = ctypes.c_void_p


class _QsDirection(ctypes.Structure):
    _fields_ = [("dt", _ptr), ("A", _ptr), ("B", _ptr), ("C", _ptr), ("bias", _ptr), ("A_cols", _i64),
                ("dt_s", _i64 * 3), ("B_s", _i64 * 4), ("C_s", _i64 * 4)]


class _QsTensors(ctypes.Structure):
    _fields_ = [("x", _ptr), ("x_s", _i64 * 4), ("gamma", _ptr), ("gamma_s", _i64 * 3),
                ("dir", _QsDirection * 2)]


def _addr(t: torch.Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


def _p(t: torch.Tensor | None) -> ctypes.c_void_p | None:
    return None if t is None else ctypes.c_void_p(t.data_ptr())


def _strides(t: torch.Tensor, n: int):
    return (_i64 * n)(*t.stride())


def _empty(*shape, dtype, like=None) -> torch.Tensor:
    """An output the CUDA glue allocates uninitialised: NaN here, so an element no thread writes shows."""
    t = torch.empty(*shape, dtype=dtype) if like is None else torch.empty_like(like, dtype=dtype)
    return t.fill_(float("nan")) if t.is_floating_point() or t.is_complex() else t


def _contig(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.contiguous()


class Harness:
    """The raw ops of ssm_plugins run through their CUDA kernels on the CPU (see the module docstring)."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.lib = ctypes.CDLL(str(self.path))
        self.lib.cuda_harness_error.restype = ctypes.c_char_p
        self.lib.cuda_harness_register.argtypes = [_ptr, ctypes.c_size_t]
        self.lib.selective_scan_bwd_scratch.restype = _i64
        self.lib.selective_scan_bwd_scratch.argtypes = [_i64] * 4
        for name in ("qs_mix_bwd_chunk", "qs_mix_bwd_columns"):
            getattr(self.lib, name).restype = _i64
            getattr(self.lib, name).argtypes = [_i64] * (1 if name.endswith("chunk") else 3)

    def set_schedule(self, name: str) -> None:
        """How a block's warps interleave: "ordered" (default: one warp at a time between barriers, alternating
        ascending and descending order) or "concurrent" (all warps free-running)."""
        self.lib.cuda_harness_set_schedule({"ordered": 0, "concurrent": 1}[name])

    def _run(self, fn: str, tensors, *args) -> None:
        """Register the storages of `tensors`, call lib.fn(*args), unregister; raise on failure."""
        self.lib.cuda_harness_clear()
        for t in tensors:
            if t is not None:
                storage = t.untyped_storage()
                self.lib.cuda_harness_register(storage.data_ptr(), storage.nbytes())
        dtype_code, *rest = args  # every entry point starts with the int dtype code
        conv = [ctypes.c_int(dtype_code)] + [ctypes.c_bool(a) if isinstance(a, bool) else _i64(a) if isinstance(a, int)
                                             else a for a in rest]
        rc = getattr(self.lib, fn)(*conv)
        self.lib.cuda_harness_clear()
        if rc != 0:
            raise HarnessError(f"{fn}: {self.lib.cuda_harness_error().decode()}")

    # -- selective scan ------------------------------------------------------------------------------------
    def selective_scan_fwd(self, u, delta, A, B, C, D, z, delta_bias, delta_softplus, delta_proj=None, reverse=False):
        u, delta, A, B, C, D, z, bias, proj = map(_contig, (u, delta, A, B, C, D, z, delta_bias, delta_proj))
        batch, dim, L = u.shape
        N, groups = A.shape[1], B.shape[1]
        rank, delta_groups = (0, 0) if proj is None else (proj.shape[1], delta.shape[1])
        out = _empty(dtype=u.dtype, like=u)
        last_state = torch.zeros(batch, dim, N, dtype=A.dtype)
        chunk_states = _empty(batch, dim, saved_states(L), N, dtype=A.dtype)
        self._run("selective_scan_fwd", (u, delta, A, B, C, D, z, bias, proj, out, last_state, chunk_states),
                  DTYPE_CODE[u.dtype], B.dtype != A.dtype, batch, dim, L, N, groups, _p(u), _p(delta), _p(z), _p(A),
                  _p(B), _p(C), _p(D), _p(bias), bool(delta_softplus), bool(reverse), _p(proj), rank, delta_groups,
                  _p(out), _p(last_state), _p(chunk_states))
        return out, last_state, chunk_states

    def selective_scan_bwd(self, u, delta, A, B, C, D, z, delta_bias, delta_softplus, grad_out, grad_last_state,
                           reverse=False, chunk_states=None):
        """The backward; without the forward's chunk_states it runs its forward pre-pass (as the op does)."""
        u, delta, A, B, C, D, z, bias = map(_contig, (u, delta, A, B, C, D, z, delta_bias))
        batch, dim, L = u.shape
        N, groups = A.shape[1], B.shape[1]
        grad_out = grad_out.to(u.dtype).contiguous()
        grad_last = None if grad_last_state is None else grad_last_state.to(A.dtype).contiguous()
        du, ddelta = _empty(dtype=u.dtype, like=u), _empty(dtype=u.dtype, like=u)
        dz = None if z is None else _empty(dtype=u.dtype, like=u)
        dA = torch.zeros_like(A)
        dB, dC = torch.zeros_like(B, dtype=A.dtype), torch.zeros_like(C, dtype=A.dtype)  # atomics in A's dtype
        dD, dbias = torch.zeros(dim, dtype=A.dtype), torch.zeros(dim, dtype=A.dtype)
        states = None if chunk_states is None else chunk_states.contiguous()
        scratch = _empty(0 if states is not None else self.lib.selective_scan_bwd_scratch(batch, dim, L, N),
                         dtype=A.dtype)
        self._run("selective_scan_bwd", (u, delta, A, B, C, D, z, bias, grad_out, grad_last, du, ddelta, dz, dA, dB,
                                         dC, dD, dbias, states, scratch),
                  DTYPE_CODE[u.dtype], B.dtype != A.dtype, batch, dim, L, N, groups, _p(u), _p(delta), _p(z), _p(A),
                  _p(B), _p(C), _p(D), _p(bias), bool(delta_softplus), bool(reverse), _p(grad_out), _p(grad_last),
                  _p(du), _p(ddelta), _p(dz), _p(dA), _p(dB), _p(dC), _p(dD), _p(dbias), _p(states), _p(scratch))
        return (du, ddelta, dA, dB.to(B.dtype), dC.to(C.dtype), dD if D is not None else None, dz,
                dbias if bias is not None else None)

    # -- quasi-separable mixing ----------------------------------------------------------------------------
    @staticmethod
    def _qs_tensors(x, dirs, gamma):
        t = _QsTensors()
        t.x, t.x_s, t.gamma, t.gamma_s = _addr(x), _strides(x, 4), _addr(gamma), _strides(gamma, 3)
        for i, (dt, A, B, C, bias) in enumerate(dirs):
            d = t.dir[i]
            d.dt, d.A, d.B, d.C, d.bias = _addr(dt), _addr(A), _addr(B), _addr(C), _addr(bias)
            d.A_cols, d.dt_s, d.B_s, d.C_s = A.shape[1], _strides(dt, 3), _strides(B, 4), _strides(C, 4)
        return t

    @staticmethod
    def _qs_dirs(dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, dt_bias, dt_bias_rev):
        # dt keeps its strides; A, B, C and the bias are made contiguous (DirectionTensors in qs_mix.h).
        return [(dt, *map(_contig, (A, B, C, dt_bias))), (dt_rev, *map(_contig, (A_rev, B_rev, C_rev, dt_bias_rev)))]

    def qs_mix_fwd(self, x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev, dt_softplus,
                   hydra_shift):
        batch, L, H, P = x.shape
        G, N = B.shape[2], B.shape[3]
        dirs = self._qs_dirs(dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, dt_bias, dt_bias_rev)
        y_acc = _empty(dtype=A.dtype, like=x)
        t = self._qs_tensors(x, dirs, gamma)
        self._run("qs_mix_fwd", (x, gamma, y_acc, *[v for d in dirs for v in d]), DTYPE_CODE[x.dtype],
                  dt.dtype != A.dtype, batch, L, H, P, N, G, ctypes.byref(t), bool(dt_softplus), bool(hydra_shift),
                  _p(y_acc), _strides(y_acc, 4))
        return y_acc.to(x.dtype)

    def qs_mix_bwd(self, grad_y, x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias, dt_bias_rev,
                   dt_softplus, hydra_shift):
        batch, L, H, P = x.shape
        G, N = B.shape[2], B.shape[3]
        acc = A.dtype
        dirs = self._qs_dirs(dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, dt_bias, dt_bias_rev)
        chunk, columns = self.lib.qs_mix_bwd_chunk(L), self.lib.qs_mix_bwd_columns(batch, H, P)
        ckpt = _empty(-(-L // chunk), N, columns, dtype=acc)
        chunk_states = _empty(chunk, N, columns, dtype=acc)
        dx_acc = _empty(batch, L, H, P, dtype=acc)
        dgamma = torch.zeros(batch, L, H, dtype=acc)
        ddt = [torch.zeros(batch, L, H, dtype=acc) for _ in range(2)]
        dA = [torch.zeros(H, d[1].shape[1], dtype=acc) for d in dirs]
        dB = [torch.zeros(batch, L, G, N, dtype=acc) for _ in range(2)]
        dC = [torch.zeros(batch, L, G, N, dtype=acc) for _ in range(2)]
        arrays = [(_ptr * 2)(*map(_addr, ts)) for ts in (ddt, dA, dB, dC)]
        t = self._qs_tensors(x, dirs, gamma)
        self._run("qs_mix_bwd", (grad_y, x, gamma, ckpt, chunk_states, dx_acc, dgamma, *ddt, *dA, *dB, *dC,
                                 *[v for d in dirs for v in d]),
                  DTYPE_CODE[x.dtype], dt.dtype != A.dtype, batch, L, H, P, N, G, ctypes.byref(t), bool(dt_softplus),
                  bool(hydra_shift), _p(grad_y), _strides(grad_y, 4), chunk, _p(ckpt), _p(chunk_states), _p(dx_acc),
                  *arrays, _p(dgamma))
        # accumulated in A's dtype; B's and C's gradients in their own (qs_mix.h's bwd_result)
        dB, dC = ([g.to(B.dtype) for g in grads] for grads in (dB, dC))
        return (dx_acc.to(x.dtype), ddt[0], dA[0], dB[0], dC[0], ddt[1], dA[1], dB[1], dC[1], dgamma)

    # -- 2-D SSM kernel ------------------------------------------------------------------------------------
    def ssm2d_kernel_fwd(self, A, B, C, height, width):
        A, B, C = A.contiguous(), B.contiguous(), C.contiguous()
        is_complex = A.dim() == 4
        S, N = A.shape[1], A.shape[2]
        K = torch.zeros(S, height, width, dtype=A.dtype)
        rows = _empty(2, width, S, N * (2 if is_complex else 1), dtype=A.dtype)
        self._run("ssm2d_kernel_fwd", (A, B, C, rows, K), DTYPE_CODE[A.dtype], is_complex, S, N, height, width,
                  _p(A), _p(B), _p(C), _p(rows), _p(K))
        return K

    def ssm2d_kernel_bwd(self, grad_K, A, B, C, height, width):
        A, B, C = A.contiguous(), B.contiguous(), C.contiguous()
        is_complex = A.dim() == 4
        S, N = A.shape[1], A.shape[2]
        wv = 2 if is_complex else 1
        grad = grad_K.to(A.dtype).contiguous()
        dA, dB, dC = (_empty(dtype=A.dtype, like=t) for t in (A, B, C))
        states = _empty(2, height, width, S, N * wv, dtype=A.dtype)
        lam = _empty(width, S, N * wv, dtype=A.dtype)
        self._run("ssm2d_kernel_bwd", (grad, A, B, C, states, lam, dA, dB, dC), DTYPE_CODE[A.dtype], is_complex,
                  S, N, height, width, _p(grad), _p(A), _p(B), _p(C), _p(states), _p(lam), _p(dA), _p(dB), _p(dC))
        return dA, dB, dC

    # -- eSSM state kernel ---------------------------------------------------------------------------------
    def essm_kernel(self, g_re, g_im, z_re, z_im, L, n_fft, bidirectional):
        gr, gi, zr, zi = (t.contiguous() for t in (g_re, g_im, z_re, z_im))
        K = _empty(*gr.shape, n_fft, dtype=gr.dtype)
        self._run("essm_kernel_fwd", (gr, gi, zr, zi, K), DTYPE_CODE[gr.dtype], gr.numel(), L, n_fft,
                  bool(bidirectional), _p(gr), _p(gi), _p(zr), _p(zi), _p(K))
        return K

    def essm_kernel_bwd(self, grad_K, g_re, g_im, z_re, z_im, L, bidirectional):
        grad_K = grad_K.contiguous()
        gr, gi, zr, zi = (t.contiguous() for t in (g_re, g_im, z_re, z_im))
        outs = [_empty(dtype=gr.dtype, like=gr) for _ in range(4)]
        self._run("essm_kernel_bwd", (grad_K, gr, gi, zr, zi, *outs), DTYPE_CODE[gr.dtype], gr.numel(), L,
                  grad_K.shape[-1], bool(bidirectional), _p(grad_K), _p(gr), _p(gi), _p(zr), _p(zi),
                  *map(_p, outs))
        return tuple(outs)

    # -- Myo tree solve ------------------------------------------------------------------------------------
    def _myo(self, rhs, b, parent, b_index, skew, adjoint, x_saved=None, grad_b=None):
        batch, N, C = rhs.shape
        out = _empty(dtype=rhs.dtype, like=rhs)
        work = _empty(batch, N, C, dtype=b.dtype)
        inv_pivot = _empty(batch, N, C, dtype=b.real.dtype if b.is_complex() else b.dtype)
        self._run("myo_solve", (rhs, b, parent, b_index, out, work, inv_pivot, x_saved, grad_b),
                  DTYPE_CODE[rhs.dtype], batch, N, C, b.shape[0], b.shape[1], _p(rhs), _p(b), _p(parent),
                  _p(b_index), bool(skew), bool(adjoint), _p(out), _p(work), _p(inv_pivot), _p(x_saved),
                  _p(grad_b))
        return out

    def myo_solve_fwd(self, u, b, parent, b_index, skew):
        u, b, parent, b_index = map(_contig, (u, b, parent, b_index))
        return self._myo(u, b, parent, b_index, skew, False)

    def myo_solve_bwd(self, grad_x, x, b, parent, b_index, skew):
        grad_x, x, b, parent, b_index = map(_contig, (grad_x, x, b, parent, b_index))
        grad_b = torch.zeros(grad_x.shape[0], b.shape[1], grad_x.shape[2], dtype=b.dtype)
        grad_u = self._myo(grad_x, b, parent, b_index, skew, True, x_saved=x, grad_b=grad_b)
        return grad_u, grad_b


_loaded: dict[Path, Harness] = {}


def load(replace: dict[str, str] | None = None, extra: tuple[str, ...] = ()) -> Harness:
    """build() then load it (one Harness per library path in this process)."""
    path = build(replace, extra)
    if path not in _loaded:
        _loaded[path] = Harness(path)
    return _loaded[path]


if __name__ == "__main__":  # python tests/cuda_harness/harness.py: build (or find) the library, print timing
    start = time.perf_counter()
    print(build(verbose=True), f"{time.perf_counter() - start:.1f} s")
