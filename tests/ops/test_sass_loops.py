"""scripts/sass_loops.py, the no-GPU measure of the CUDA kernels' registers and loop sizes (csrc/README's figures)."""
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from _scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "sass_loops.py"

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")


def script_module():
    return load_script(SCRIPT, "sass_loops")


def run(*args):
    done = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_reports_each_kernels_registers_and_its_loops_with_their_barriers():
    out = run("ssm_plugins/csrc/cuda/myo.cu", "--kernel", "solve_kernelIfE", "--min-loop", "50")
    kernels = re.findall(r"^_Z\S+solve_kernelIfE\S*$", out, re.M)
    assert len(kernels) == 1, out  # --kernel keeps the float32 solve only
    regs = re.search(r"registers (\d+), stack (\d+) bytes, (\d+) instructions", out)
    assert regs and 0 < int(regs.group(1)) <= 255 and int(regs.group(3)) > 100, out
    loops = re.findall(r"loop \[(\d+), (\d+)\]: (\d+) instructions \(.*BAR (\d+)\)", out)
    assert loops and all(int(n) >= 50 and int(n) == int(hi) - int(lo) + 1 for lo, hi, n, _ in loops), out
    assert any(int(bar) > 0 for *_, bar in loops), out  # the tree levels' block barriers sit inside a loop


def test_reads_a_built_binary_as_it_reads_the_source(tmp_path):
    """A built object (as mamba_ssm's extension .so, to set its loops beside ours) gives the .cu file's report."""
    source = ROOT / "ssm_plugins" / "csrc" / "cuda" / "myo.cu"
    obj = tmp_path / "myo.o"
    script = script_module()
    subprocess.run([shutil.which("nvcc"), *script.FLAGS, "-gencode=arch=compute_90,code=sm_90", "-c", str(source), "-o",
                    str(obj)], check=True)
    from_source = run(str(source), "--kernel", "solve_kernelIfE")
    from_binary = run(str(obj), "--kernel", "solve_kernelIfE")
    strip = lambda out: re.sub(r"_GLOBAL__N__\w+?_", "", out)  # noqa: E731  (anonymous namespaces' per-build ids)
    assert "loop [" in from_binary and strip(from_binary) == strip(from_source)
    wrong_arch = subprocess.run([sys.executable, str(SCRIPT), str(obj), "--arch", "sm_80"], capture_output=True,
                                text=True, cwd=ROOT)
    assert wrong_arch.returncode != 0 and "holds no sm_80 cubin" in wrong_arch.stderr


def test_compiles_with_the_extensions_nvcc_flags():
    """The static figures are only the extension's if the script compiles as setup.py does (-ftz=true turns a
    decay's exp2 from four instructions into one): every code-generation flag of setup.py's nvcc list is in FLAGS."""
    script = script_module()
    listed = re.search(r"^\s*nvcc = \[(.*?)\]", (ROOT / "setup.py").read_text(), re.M | re.S)
    flags = re.findall(r'"([^"]+)"', listed.group(1))
    assert "-ftz=true" in flags
    assert [f for f in flags if f != "-lineinfo"] == [f for f in script.FLAGS if not f.startswith(("-D", "-I"))]
