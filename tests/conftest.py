import hashlib
import os
import tempfile
from pathlib import Path

import pytest
import torch


def _source_keyed_inductor_cache():
    """Inductor's FX-graph and AOT-autograd caches key a graph by its own code, not by our ops' fake kernels and
    autograd formulas: a graph cached before a change to those is replayed after it (a stale stride assertion fails
    a correct change; a broken fake kernel would pass). So the tests use one cache directory per hash of
    ssm_plugins' sources (a warm cache still serves reruns of unchanged code). An explicit TORCHINDUCTOR_CACHE_DIR
    is kept."""
    if "TORCHINDUCTOR_CACHE_DIR" in os.environ:
        return
    package = Path(__file__).resolve().parent.parent / "ssm_plugins"
    digest = hashlib.sha1()
    for path in sorted(package.rglob("*")):
        if path.suffix in (".py", ".cpp", ".h", ".cu") and "__pycache__" not in path.parts:
            digest.update(path.relative_to(package).as_posix().encode() + path.read_bytes())
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tempfile.gettempdir(),
                                                         f"torchinductor_ssm_plugins_{digest.hexdigest()[:12]}")


_source_keyed_inductor_cache()


def pytest_collection_modifyitems(config, items):
    # GPU tests are real tests of the CUDA kernels; without a device they are skipped, never faked.
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


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
