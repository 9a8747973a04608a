"""The installed stack, the compiled extension and the weight of ``import ssm_plugins``."""
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TOOLBOXES = ("mmdet", "mmseg", "mmpretrain", "mmcv", "mmengine", "speechbrain")


def _normal(name):
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503


def _locked(filename):
    """{normalised name: version} of a lock file written by `make lock` (scripts/lock.sh)."""
    pins = {}
    for line in (ROOT / "requirements" / filename).read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line)
        if m:
            pins[_normal(m.group(1))] = m.group(2)
    return pins


def _drift(installed, locked):
    """Every package whose installed version differs from the lock, or that only one side has, by name."""
    return {name: (locked.get(name, "not in the lock"), installed.get(name, "not installed"))
            for name in sorted(set(installed) | set(locked)) if installed.get(name) != locked.get(name)}


def test_installed_environment_is_the_lock():
    # the whole environment, every distribution importlib.metadata sees, against requirements/lock.txt plus the
    # two exceptions the lock names: mmcv (built from the source in mmcv.txt) and this project
    # the environment's own site-packages only: once pkg_resources is imported (mim, mmcv), setuptools' vendored
    # packages (setuptools/_vendor/*.dist-info) are on sys.path too, and they are setuptools' files, not installs
    import sysconfig
    site = sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})
    installed = {_normal(d.metadata["Name"]): d.version for d in importlib.metadata.distributions(path=site)}
    locked = {**_locked("lock.txt"), **_locked("mmcv.txt"), "ssm-plugins": importlib.metadata.version("ssm-plugins")}
    drift = _drift(installed, locked)
    assert not drift, ("the installed environment differs from requirements/lock.txt (lock, installed); "
                       f"rebuild it with `bash scripts/env.sh`, or run `make lock` after editing requirements/*.in: {drift}")


def test_drift_names_each_difference():
    assert _drift({"torch": "2.11.0", "tqdm": "4.70.1", "extra": "1.0"},
                  {"torch": "2.11.0", "tqdm": "4.67.0", "numpy": "1.26.4"}) == {
        "extra": ("not in the lock", "1.0"), "numpy": ("1.26.4", "not installed"), "tqdm": ("4.67.0", "4.70.1")}


def test_lock_holds_every_pin_of_the_input():
    # an edit of requirements/stack.in without `make lock` leaves the lock behind
    locked = _locked("lock.txt")
    for source in ("stack.in", "nodeps.in"):
        pins = _locked(source)
        assert pins and not {n: v for n, v in pins.items() if locked.get(n) != v}, (
            f"requirements/{source} pins versions requirements/lock.txt lacks: run `make lock`")
    assert _locked("mmcv.txt") == _locked("mmcv.in")


def test_stack_imports_together():
    code = ("import torch, torchvision, torchaudio, timm, mmengine, mmcv, mmdet, mmseg, speechbrain, soundfile; "
            "import mmcv.ops; from mmdet.registry import MODELS; from mmseg.registry import MODELS as M2; "
            "from speechbrain.lobes.models.dual_path import Dual_Path_Model; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("ok"), out.stderr[-3000:]


def test_mmcv_nms_runs_on_cpu():
    from mmcv.ops import nms

    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [50, 50, 60, 60], [0, 0, 10, 9]], dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    dets, keep = nms(boxes, scores, iou_threshold=0.5)
    assert keep.tolist() == [3, 2]  # 0 and 1 overlap box 3 (IoU > 0.5)
    assert torch.allclose(dets[:, 4], torch.tensor([0.95, 0.7]))


def test_mmcv_roi_align_matches_torchvision_on_cpu():
    from mmcv.ops import RoIAlign
    from torchvision.ops import roi_align

    torch.manual_seed(0)
    feats = torch.randn(2, 3, 17, 13)
    rois = torch.tensor([[0, 1.5, 2.0, 9.0, 11.5], [1, 0.0, 0.0, 12.0, 16.0], [1, 4.2, 3.3, 7.7, 8.1]])
    ours = RoIAlign((5, 4), spatial_scale=0.5, sampling_ratio=2, aligned=True)(feats, rois)
    ref = roi_align(feats, rois, (5, 4), spatial_scale=0.5, sampling_ratio=2, aligned=True)
    assert ours.shape == (3, 3, 5, 4)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-5)


def test_extension_loads_with_cpu_kernels():
    from ssm_plugins.ops import backend_info

    info = backend_info()
    assert info["extension"], info["extension_error"]
    assert "cpu" in info["ops"]["selective_scan_fwd"]


@pytest.mark.skipif(torch.version.cuda is None or shutil.which("nvcc") is None,
                    reason="the CUDA sources are compiled only with nvcc and a CUDA build of torch")
def test_extension_has_compiled_cuda_kernels():
    # No GPU is needed to see that the CUDA kernels were compiled and registered for the CUDA key.
    from ssm_plugins.ops import backend_info

    ops = backend_info()["ops"]
    assert len(ops) >= 10
    assert [op for op, devices in ops.items() if "cuda" not in devices] == []


def test_compiled_selective_scan_equals_reference():
    from ssm_plugins.ops import reference, selective_scan

    g = torch.Generator().manual_seed(0)
    b, d, L, n = 2, 5, 19, 3
    u, dt, z = (torch.randn(b, d, L, generator=g) for _ in range(3))
    A = -torch.rand(d, n, generator=g)
    B, C = torch.randn(b, n, L, generator=g), torch.randn(b, n, L, generator=g)
    D, bias = torch.randn(d, generator=g), torch.randn(d, generator=g)
    ours = selective_scan(u, dt, A, B, C, D, z, bias, delta_softplus=True, return_last_state=True)
    ref = reference.selective_scan(u, dt, A, B, C, D, z, bias, delta_softplus=True, return_last_state=True)
    torch.testing.assert_close(ours[0], ref[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[1], ref[1], rtol=1e-5, atol=1e-5)


def _python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env}, cwd=ROOT)


def test_import_is_light_and_fast():
    # CPU time (process_time) of what ssm_plugins adds on top of torch: `import torch` alone costs 1.2-2.2 s of CPU
    # on this project's machine depending on the day, so an absolute bound on the whole import measures the machine
    code = ("import sys, time; t = time.process_time(); import torch; t1 = time.process_time(); import ssm_plugins; "
            "t2 = time.process_time(); print(t1 - t, t2 - t1); "
            f"print(sorted(m for m in {TOOLBOXES!r} if m in sys.modules))")
    # best of three: the first run warms the file cache
    runs = [_python(code) for _ in range(3)]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-3000:]
    own = min(float(r.stdout.strip().splitlines()[-2].split()[1]) for r in runs)
    loaded = runs[-1].stdout.strip().splitlines()[-1]
    assert loaded == "[]", f"import ssm_plugins pulled in toolboxes: {loaded}"
    assert own < 0.8, f"import ssm_plugins took {own:.2f} s on top of import torch"


def test_missing_extension_warns_once_and_uses_reference():
    code = (
        "import sys, warnings, torch\n"
        "sys.modules['ssm_plugins._C'] = None  # makes 'from ssm_plugins import _C' raise ImportError\n"
        "from ssm_plugins.ops import selective_scan, backend_info\n"
        "u = torch.randn(1, 2, 5); A = -torch.ones(2, 3); B = torch.randn(1, 3, 5)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    y1 = selective_scan(u, u.abs(), A, B, B); y2 = selective_scan(u, u.abs(), A, B, B)\n"
        "msgs = [str(x.message) for x in w if 'ssm_plugins._C' in str(x.message)]\n"
        "print(len(msgs), backend_info()['extension'], bool(torch.isfinite(y1).all()))\n"
        # qs_mix with scalar A takes its chunked form there (the oracle loops over L): the oracle's numbers
        "import importlib, os; from ssm_plugins.ops import qs_mix\n"
        "x = torch.randn(2, 37, 3, 4); dt = torch.randn(2, 37, 3); A = -torch.rand(3); Bs = torch.randn(2, 37, 1, 5)\n"
        "module = importlib.import_module('ssm_plugins.ops.qs_mix'); calls = []; chunked = module.qs_mix_chunked\n"
        "module.qs_mix_chunked = lambda *a, **k: calls.append(1) or chunked(*a, **k)\n"
        "y = qs_mix(x, dt, A, Bs, Bs, dt, A, Bs, Bs, dt, dt_softplus=True)\n"
        "os.environ['SSM_PLUGINS_BACKEND'] = 'reference'\n"
        "want = qs_mix(x, dt, A, Bs, Bs, dt, A, Bs, Bs, dt, dt_softplus=True)\n"
        "print(len(calls), bool(torch.allclose(y, want, atol=1e-5)))\n"
    )
    out = _python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["1", "False", "True", "1", "True"]


@pytest.mark.parametrize("order", ["ssm_plugins first", "timm first"])
def test_models_register_with_timm_in_either_import_order(order):
    imports = "import ssm_plugins; import timm" if order == "ssm_plugins first" else "import timm; import ssm_plugins"
    code = (f"{imports}; import importlib.resources as r; "
            "print('deit_tiny_patch16_224_ssm2d' in timm.list_models('*_ssm2d'), "
            "r.files('timm').joinpath('__init__.py').is_file(), ssm_plugins.models.__name__)")
    out = _python(code)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["True", "True", "ssm_plugins.models"]


def _private_imports():
    """(file, line, module, name) of every ``from <one of our modules> import _name`` in the package where
    ``_name`` is not a module: a private helper used outside the module that defines it."""
    import ast

    package = ROOT / "ssm_plugins"
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        here = parts[:-1]  # the package the file's relative imports start from
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = here[:len(here) - node.level + 1] + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "ssm_plugins":
                base = node.module.split(".")
            else:
                continue
            for alias in node.names:
                name = alias.name
                if not name.startswith("_") or name.startswith("__") or name == "_C":
                    continue
                target = ROOT.joinpath(*base, name)
                if not (target.with_suffix(".py").exists() or (target / "__init__.py").exists()):
                    found.append((str(path.relative_to(ROOT)), node.lineno, ".".join(base), name))
    return found


def test_no_module_imports_another_modules_private_names():
    # shared helpers have one public home (layers/_common.py, models/_common.py, ...); importing a private module
    # of the same package (ops._backend) is fine, a private name out of another module is not
    assert _private_imports() == []
