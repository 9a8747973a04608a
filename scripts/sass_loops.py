"""Static SASS figures of our CUDA kernels, for machines without a GPU: registers, stack and the loops.

    python scripts/sass_loops.py ssm_plugins/csrc/cuda/selective_scan.cu [--arch sm_90] [--kernel REGEX]
    python scripts/sass_loops.py .gpu_carry/site/selective_scan_cuda*.so --kernel Fwd   # a built binary

Compiles one .cu file with nvcc (the extension's flags) to a cubin, or takes the cubins of a built binary (a .cubin,
or an extension .so / object file: cuobjdump extracts those of --arch, e.g. mamba_ssm's selective scan from
scripts/build_mamba_scan.sh, to set our loops beside theirs), and disassembles it with nvdisasm (CUDA's own,
or the copy in triton's wheel, which our stack installs). Per kernel: registers, stack bytes, total instructions,
then every loop (a branch back to an earlier label; nested loops indented) with its instruction count and the
MUFU, shuffle, atomic/reduction, global load/store, local-memory and barrier instructions in it. A state loop's
count divided by the steps (and states) it handles is the instructions-per-step figure the READMEs quote. The
counts are static: both arms of a branch inside a loop are counted, so the READMEs' per-path figures come from
copies of the source with the branch's condition fixed. No GPU timing replaces this: `scripts/gpu_check.sh`
measures on a GPU.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FLAGS = ["-O3", "--expt-relaxed-constexpr", "-std=c++17", "-ftz=true", "-DWITH_CUDA",  # setup.py's nvcc flags
         f"-I{ROOT / 'ssm_plugins' / 'csrc'}"]
CLASSES = {"MUFU": ("MUFU",), "SHFL": ("SHFL",), "atomic": ("RED", "ATOM"), "LDG": ("LDG",), "STG": ("STG",),
           "local": ("LDL", "STL"), "BAR": ("BAR",)}


def tool(name: str) -> str:
    """nvdisasm / cuobjdump: CUDA's, else the copy triton ships."""
    found = shutil.which(name) or (os.path.join(os.environ["CUDA_HOME"], "bin", name) if "CUDA_HOME" in os.environ
                                   else None)
    if found and os.path.exists(found):
        return found
    try:
        import triton
    except ImportError:
        triton = None
    if triton is not None:
        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / name
        if bundled.exists():
            return str(bundled)
    sys.exit(f"sass_loops: {name} not found (CUDA_HOME/bin, PATH or triton's wheel)")


def output(name: str, *args: str) -> str:
    return subprocess.run([tool(name), *args], capture_output=True, text=True, check=True).stdout


def resources(cubin: str) -> dict[str, tuple[int, int]]:
    """Registers and stack bytes per kernel."""
    usage, name = {}, None
    for line in output("cuobjdump", "-res-usage", cubin).splitlines():
        m = re.search(r"Function (\S+):", line)
        if m:
            name = m.group(1)
        m = re.search(r"REG:(\d+) STACK:(\d+)", line)
        if m and name:
            usage[name] = (int(m.group(1)), int(m.group(2)))
    return usage


def functions(cubin: str) -> dict[str, tuple[list[str], dict[str, int]]]:
    """Per kernel: its instructions in order and the index each branch label points at."""
    funcs, name = {}, None
    for line in output("nvdisasm", "-c", cubin).splitlines():
        m = re.match(r"^\s*\.text\.(\S+):", line)
        if m:
            name = m.group(1)
            funcs[name] = ([], {})
        elif name and (m := re.match(r"^(\.L_x_\d+):", line)):
            funcs[name][1][m.group(1)] = len(funcs[name][0])
        elif name and (m := re.match(r"^\s*/\*[0-9a-f]+\*/\s+(.*?);", line)):
            funcs[name][0].append(m.group(1).strip())
    return funcs


def opcode(instruction: str) -> str:
    """The opcode of one instruction, past its predicate (`@P0`, `@!UP1`)."""
    words = instruction.split()
    return words[1] if words[0].startswith("@") and len(words) > 1 else words[0]


def loops(ins: list[str], labels: dict[str, int]) -> list[tuple[int, int, int]]:
    """(first, last, depth) of every loop: a branch back to a label at or before it; depth counts the loops around
    it (a state loop inside a chunk loop has depth 1). Spans that straddle a larger loop's boundary (the branches
    back from out-of-line slow paths, such as a divergent shuffle's) are left out."""
    spans = []
    for i, s in enumerate(ins):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", s)
        if m and labels.get(m.group(1), len(ins)) <= i:
            spans.append((labels[m.group(1)], i))
    kept = []
    for lo, hi in sorted(set(spans), key=lambda span: span[0] - span[1]):  # largest first
        if all(hi < a or b < lo or (a <= lo and hi <= b) for a, b in kept):
            kept.append((lo, hi))
    return sorted((lo, hi, sum(a <= lo and hi <= b and (a, b) != (lo, hi) for a, b in kept)) for lo, hi in kept)


def cubins(source: str, arch: str, tmp: str) -> list[str]:
    """The cubins to read: a .cu file compiled for ``arch``, a .cubin itself, or those of ``arch`` in a binary."""
    if source.endswith(".cubin"):
        return [source]
    if source.endswith(".cu"):
        nvcc = shutil.which("nvcc") or sys.exit("sass_loops: nvcc not found")
        cubin, number = os.path.join(tmp, "kernels.cubin"), arch.replace("sm_", "")
        subprocess.run([nvcc, *FLAGS, f"-gencode=arch=compute_{number},code=sm_{number}", "-cubin", source,
                        "-o", cubin], check=True)
        return [cubin]
    binary = os.path.abspath(source)
    subprocess.run([tool("cuobjdump"), "-xelf", "all", binary], cwd=tmp, check=True, capture_output=True)
    found = sorted(str(p) for p in Path(tmp).glob(f"*.{arch}.cubin"))
    if not found:
        sys.exit(f"sass_loops: {source} holds no {arch} cubin (cuobjdump -lelf lists what it has)")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", help="a .cu file of ssm_plugins/csrc/cuda, or a .cubin / built .so to read")
    parser.add_argument("--arch", default="sm_90")
    parser.add_argument("--kernel", default=".", help="regex on the mangled kernel names")
    parser.add_argument("--min-loop", type=int, default=30, help="hide loops with fewer instructions")
    args = parser.parse_args()
    if not os.path.isfile(args.source):
        sys.exit(f"sass_loops: source {args.source!r} is not a file")
    usage, funcs = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for cubin in cubins(args.source, args.arch, tmp):
            usage.update(resources(cubin))
            funcs.update(functions(cubin))
    for name, (ins, labels) in sorted(funcs.items()):
        if not re.search(args.kernel, name):
            continue
        regs, stack = usage.get(name, (-1, -1))
        print(f"{name}\n  registers {regs}, stack {stack} bytes, {len(ins)} instructions")
        for lo, hi, depth in loops(ins, labels):
            body = ins[lo:hi + 1]
            if len(body) < args.min_loop:
                continue
            ops = [opcode(s) for s in body]
            counts = ", ".join(f"{k} {sum(op.startswith(prefixes) for op in ops)}" for k, prefixes in CLASSES.items())
            print(f"  {'  ' * depth}loop [{lo}, {hi}]: {len(body)} instructions ({counts})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
