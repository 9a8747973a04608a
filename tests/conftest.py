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
    """Run a test on one intra-op thread: small models are faster so, and timings stop depending on the load."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
