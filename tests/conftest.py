import json
import os
import sys
import time
from collections import OrderedDict
from pathlib import Path

import pytest
import torch


def pytest_configure(config):
    # `pytest -n N` (make test: one worker per core): each worker's torch (and the commands it starts) on one thread
    # unless the caller chose; N workers of N threads each on N cores wait on one another's OpenMP regions. Set in
    # the controller before the workers start, so no worker lowers a thread count it then raises (see one_thread).
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(name, "1")
        return  # xdist's controller runs no test
    _remember_inductor_isa_probes()


def _remember_inductor_isa_probes():
    """Inductor (CPU) picks its vector ISA by building a probe library per ISA and loading each in a fresh Python
    that imports torch: 10 probes, 20-33 s of every process's first compile on the 2-core machine, warm cache or not
    (pytorch/pytorch#140970). torch 2.11 caches the builds but not the load probes; later torch remembers a probe that
    loaded (pytorch/pytorch#190561, ``.load_ok`` markers). The same here, for the suite's processes: a probe that
    loaded once for this compiler, flags, torch and CPU is not loaded again; one that failed is retried."""
    from torch._inductor import cpu_vec_isa
    from torch._inductor.codecache import get_hash
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    probe = cpu_vec_isa.VecISA.check_build

    def check_build(isa, code):
        key = get_hash(code.strip(), f"{cpu_vec_isa._get_isa_dry_compile_fingerprint(isa._arch_flags)}="
                       f"{cpu_vec_isa.x86_isa_checker()}", "code")
        marker = Path(cache_dir(), "vec_isa_probes", f"{key}.load_ok")
        if marker.exists():
            return True
        loaded = probe(isa, code)
        if loaded:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.touch()
        return loaded

    cpu_vec_isa.VecISA.check_build = check_build


def pytest_collection_modifyitems(config, items):
    # GPU tests are real tests of the CUDA kernels; without a device they are skipped, never faked.
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_openmmlab_default_scope():
    """A test that sets mmengine's default scope (init_default_scope, as a toolbox's runner does) would leave it set
    for every later test in its worker: a TimmClassifier built next would be looked up in mmseg's registry, and which
    test runs next depends on xdist's scheduling. Each test leaves the scope as it found it. mmengine keeps the
    scopes in DefaultScope._instance_dict, latest current (its own overwrite_default_scope restores it so too)."""
    registry = sys.modules.get("mmengine.registry")
    saved = OrderedDict(registry.DefaultScope._instance_dict) if registry else OrderedDict()
    yield
    registry = sys.modules.get("mmengine.registry")
    if registry:
        registry.DefaultScope._instance_dict = saved


@pytest.fixture
def one_thread():
    """Run a test on one intra-op thread: small models are faster so, and timings stop depending on the load.
    Beware: on torch 2.11 + MKL, lowering and then raising the thread count breaks batched LU (torch.linalg.solve
    on a batch of 512x512 float64 matrices: "oneMKL ERROR ... DLASWP", bad pivots) for the rest of the process;
    Cholesky and per-matrix solves are unaffected."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# Where the suite's time goes: each run of the whole suite (not of a -k or file selection) records its wall time and
# every test's seconds (setup + call + teardown, as xdist's workers report them) in DURATIONS, which
# `make test-durations` (scripts/test_durations.py) reads against the 20-minute budget. A record of time only: no
# test reads it.
DURATIONS = ".pytest_cache/ssm_plugins/durations.json"
_run = {"tests": {}}


def pytest_sessionstart(session):
    _run["start"] = time.time()


def pytest_runtest_logreport(report):
    _run["tests"][report.nodeid] = _run["tests"].get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session, exitstatus):
    config = session.config
    whole = not config.option.keyword and all(Path(a).resolve() == Path(config.rootpath, "tests").resolve()
                                              for a in config.args)
    if hasattr(config, "workerinput") or not whole or not _run["tests"]:
        return
    path = Path(config.rootpath, DURATIONS)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "when": time.strftime("%Y-%m-%d %H:%M"), "wall_s": round(time.time() - _run["start"], 1),
        "markers": config.option.markexpr, "workers": getattr(config.option, "numprocesses", None),
        "exit": int(exitstatus), "tests": {k: round(v, 3) for k, v in _run["tests"].items()}},
        indent=0))
