import pytest
import torch


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
