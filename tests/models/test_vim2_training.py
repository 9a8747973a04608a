"""ViM2 in training set-ups: Switch of Scans routes each image to its own scan, yet under DistributedDataParallel
(gloo, 2 CPU processes, find_unused_parameters=False) every parameter must receive a gradient, or DDP stops the
step; and a classifier's checkpoint must load into the dense (detection/segmentation) backbone."""
import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TINY = dict(num_classes=5, img_size=32, embed_dim=32, depth=2, n_interactions=1, drop_path_rate=0.0)


def _worker(rank, world, init_file, result_dir, scan_mode, top_n):
    import timm

    import ssm_plugins  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        torch.manual_seed(0)  # same initial weights on both ranks
        model = timm.create_model("vim2_t", scan_mode=scan_mode, sos_top_n=top_n, **TINY)
        ddp = torch.nn.parallel.DistributedDataParallel(model, find_unused_parameters=False)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        torch.manual_seed(100 + rank)  # different images per rank, so routing differs between ranks
        for _ in range(2):
            loss = ddp(torch.randn(3, 3, 32, 32)).logsumexp(-1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        torch.save(flat, os.path.join(result_dir, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("top_n", [1, pytest.param(2, marks=pytest.mark.exhaustive)])
def test_sos_trains_under_ddp_without_unused_parameters(tmp_path, top_n):
    mp.spawn(_worker, args=(2, str(tmp_path / "init"), str(tmp_path), "sos", top_n), nprocs=2, join=True)
    rank0, rank1 = torch.load(tmp_path / "rank0.pt"), torch.load(tmp_path / "rank1.pt")
    torch.testing.assert_close(rank0, rank1)  # gradients were averaged: both ranks took the same steps


def test_classifier_checkpoint_loads_into_a_dense_backbone(tmp_path):
    # the classifier has no dense-only weights (they would get no gradient); the backbone keeps fresh ones
    import timm

    import ssm_plugins  # noqa: F401

    classifier = timm.create_model("vim2_t", **TINY)
    path = tmp_path / "vim2_t_tiny.pth"
    torch.save(classifier.state_dict(), path)
    kwargs = {k: v for k, v in TINY.items() if k != "num_classes"}
    backbone = timm.create_model("vim2_t", features_only=True, pretrained=True,
                                 pretrained_cfg_overlay=dict(file=str(path)), **kwargs)
    torch.testing.assert_close(backbone.model.patch_embed.proj.weight, classifier.patch_embed.proj.weight)
    assert [f.shape[-1] for f in backbone(torch.randn(1, 3, 64, 64))] == [16, 8, 4, 2]
