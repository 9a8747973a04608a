"""mmengine's FLOP counter (get_model_complexity_info, MMDetection's get_flops.py) counts our ops and torch's FFTs
(ssm_plugins.openmmlab.flops), as torch's FlopCounterMode does, at mmengine's one FLOP per multiply-add."""
import logging

import pytest
import torch

pytest.importorskip("mmengine")

import ssm_plugins.openmmlab  # noqa: E402,F401  (installs the handles, as our configs' custom_imports do)
from mmengine.analysis import FlopAnalyzer, get_model_complexity_info  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402


def _torch_counts(model, x):
    with FlopCounterMode(display=False) as counter:
        model(x)
    return counter.get_total_flops(), {str(op).split(".")[-1]: n for op, n in counter.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize("name,ops", [("vim2_t", ("selective_scan_fwd", "qs_mix_fwd")),
                                      pytest.param("viqs_t", ("qs_mix_fwd",), marks=pytest.mark.exhaustive)])
def test_mmengine_counts_our_ops_as_torch_does(name, ops, caplog):
    import timm

    model = timm.create_model(name, embed_dim=64, depth=4, img_size=32).eval()
    x = torch.randn(1, 3, 32, 32)
    analyzer = FlopAnalyzer(model, (x,))
    with caplog.at_level(logging.WARNING):
        total, by_operator = analyzer.total(), analyzer.by_operator()
    assert not [op for op in analyzer.unsupported_ops() if op.startswith("ssm_plugins::")]
    torch_total, torch_by_op = _torch_counts(model, x)
    for op in ops:
        assert by_operator[op] == torch_by_op[op] // 2 > 0, op
    # the rest is mmengine's and torch's own handles of aten ops (measured: vim2_t 3.525M against 3.457M)
    assert total == pytest.approx(torch_total / 2, rel=0.05)
    # the call MMDetection's get_flops.py makes
    info = get_model_complexity_info(model, inputs=(x,), show_table=False, show_arch=False)
    assert info["flops"] == total


# one model per family besides ViM2 / ViQS above (measured 2026-12-01, mmengine against FlopCounterMode / 2:
# 184.5 / 183.3 M, 198.3 / 197.1 M, 16.9 / 16.7 M, 4,393 / 4,376 M)
FAMILIES = ["vit_cifar_patch4_32_ssm2d", "mega_cifar_patch4_32_ssm2d", "essm_scifar_tiny", "myonet_tiny"]


@pytest.mark.parametrize("name", FAMILIES)
def test_mmengine_traces_and_counts_every_family(name):
    import timm

    model = timm.create_model(name).eval()
    x = torch.randn(1, *model.pretrained_cfg["input_size"])
    analyzer = FlopAnalyzer(model, (x,))
    total = analyzer.total()  # the trace: our shape checks take the sizes it records as tensors
    assert not [op for op in analyzer.unsupported_ops() if op.startswith("ssm_plugins::") or "fft" in op]
    torch_total, _ = _torch_counts(model, x)
    assert total == pytest.approx(torch_total / 2, rel=0.02)


class _FFTs(torch.nn.Module):
    def forward(self, x):  # x (2, 3, 8, 12)
        y = torch.fft.irfft(torch.fft.rfft(x, n=24), n=24)
        z = torch.fft.irfft2(torch.fft.rfft2(x, s=(16, 24)), s=(16, 24))
        w = torch.fft.ifftn(torch.fft.fftn(x.to(torch.complex64), dim=(-1,))).real
        return y.sum() + z.sum() + w.sum()


def test_mmengine_counts_torch_fft_ops_as_torch_does():
    x = torch.randn(2, 3, 8, 12)
    analyzer = FlopAnalyzer(_FFTs(), (x,))
    total = analyzer.total()
    assert not [op for op in analyzer.unsupported_ops() if "fft" in op]
    torch_total, _ = _torch_counts(_FFTs(), x)
    assert total > 0 and total == pytest.approx(torch_total / 2, abs=6)  # each of the 6 ops halved and rounded
