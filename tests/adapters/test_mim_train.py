"""End to end through the real command line: ``mim train`` of a paper config (shrunk by --cfg-options to a CPU run
on the embedded data), its evaluation, ``mim test`` of the saved checkpoint and ``mim train --resume``."""
import json
from pathlib import Path

import pytest
import torch

from _openmmlab import REPO, succeeded
from ssm_plugins.openmmlab_tiny import logged_runs, mim, mmdet_tiny_options, mmseg_tiny_options

pytest.importorskip("mmdet")
pytest.importorskip("mmseg")
pytestmark = pytest.mark.slow  # each toolbox: three mim runs, about 2-4 minutes on 2 busy cores

MMDET_CONFIG = REPO / "configs_mmdet" / "vim2" / "mask-rcnn_vim2-t_fpn_1x_coco.py"
MMSEG_CONFIG = REPO / "configs_mmseg" / "viqs" / "upernet_viqs-t_4xb4-160k_ade20k-512x512.py"


def _train_losses(records):
    return {r["iter"]: r["loss"] for r in records if "loss" in r}


def _test_metrics(work_dir: Path):
    (log,) = [p for p in Path(work_dir).glob("*/*.json")]
    return json.loads(log.read_text().splitlines()[-1])


class _Toolbox:
    """One toolbox's tiny run: train (run 1), then test and resume reuse its work dir."""

    def __init__(self, name, config, options, work_dir):
        self.name, self.config, self.options, self.work_dir = name, config, options, work_dir
        self.first = succeeded(mim("train", name, config, work_dir, options(1)))
        (self.records,) = logged_runs(work_dir)


@pytest.fixture(scope="module")
def mmdet_run(tmp_path_factory):
    from ssm_plugins.data.coco_digits import coco_digits

    root = coco_digits()
    def options(epochs, *more):  # 8 training images, batch 2: 4 iterations per epoch; CocoMetric on 10 val images
        return mmdet_tiny_options(root, epochs=epochs, val_images=10) + list(more)

    return _Toolbox("mmdet", MMDET_CONFIG, options, tmp_path_factory.mktemp("mmdet_run"))


@pytest.fixture(scope="module")
def mmseg_run(tmp_path_factory):
    from ssm_plugins.data.ade_digits import ade_digits

    root = ade_digits()

    def options(n, *more):  # n: length of the run in units of 4 iterations (as mmdet's epochs)
        return mmseg_tiny_options(root, iters=4 * n, val_images=10) + list(more)

    return _Toolbox("mmseg", MMSEG_CONFIG, options, tmp_path_factory.mktemp("mmseg_run"))


def test_mim_train_mmdet_evaluates_bbox_and_segm(mmdet_run):
    losses = _train_losses(mmdet_run.records)
    assert sorted(losses) == [1, 2, 3, 4]
    (val,) = [r for r in mmdet_run.records if "coco/bbox_mAP" in r]
    for key in ("coco/bbox_mAP", "coco/bbox_mAP_50", "coco/segm_mAP", "coco/segm_mAP_50"):
        assert 0.0 <= val[key] <= 1.0, key
    assert (mmdet_run.work_dir / "epoch_1.pth").exists()


def test_mim_train_mmseg_evaluates_miou(mmseg_run):
    losses = _train_losses(mmseg_run.records)
    assert sorted(losses) == [1, 2, 3, 4]
    (val,) = [r for r in mmseg_run.records if "mIoU" in r]
    assert 0.0 <= val["mIoU"] <= 100.0 and "aAcc" in val
    assert (mmseg_run.work_dir / "iter_4.pth").exists()


# the UperNet case under exhaustive: mim test is the toolbox's own command; what it needs of ours (the config and our
# backbone loading the checkpoint it names) the Mask R-CNN case and the inferencer test of the UperNet checkpoint check
@pytest.mark.parametrize("run, checkpoint, metric", [
    ("mmdet_run", "epoch_1.pth", "coco/segm_mAP_50"),
    pytest.param("mmseg_run", "iter_4.pth", "mIoU", marks=pytest.mark.exhaustive)])
def test_mim_test_reproduces_the_validation_of_the_checkpoint(run, checkpoint, metric, request):
    run = request.getfixturevalue(run)
    test_dir = run.work_dir / "test"
    done = succeeded(mim("test", run.name, run.config, test_dir, run.options(1), "--checkpoint",
                         str(run.work_dir / checkpoint)))
    assert f"Load checkpoint from {run.work_dir / checkpoint}" in done.stdout + done.stderr
    tested = _test_metrics(test_dir)
    (val,) = [r for r in run.records if metric in r]
    assert tested[metric] == pytest.approx(val[metric], abs=1e-4)


@pytest.mark.parametrize("run, checkpoint", [("mmdet_run", "epoch_1.pth"), ("mmseg_run", "iter_4.pth")])
def test_inferencer_runs_the_checkpoint_mim_train_wrote(run, checkpoint, request):
    # what a user calls next (issue 32): the toolbox's inferencer on the config mim train dumped and its checkpoint;
    # it must find our backbone (the config's custom_imports), load the trained weights and predict at image size
    from PIL import Image

    run = request.getfixturevalue(run)
    weights = run.work_dir / checkpoint
    if run.name == "mmdet":
        from mmdet.apis import DetInferencer as Inferencer

        from ssm_plugins.data.coco_digits import coco_digits
        image = Path(coco_digits()) / "val2017" / "000001.jpg"
    else:
        from mmseg.apis import MMSegInferencer as Inferencer

        from ssm_plugins.data.ade_digits import ade_digits
        image = Path(ade_digits()) / "images" / "validation" / "ADE_digits_validation_000001.jpg"
    inferencer = Inferencer(model=str(run.work_dir / run.config.name), weights=str(weights), device="cpu")
    assert type(inferencer.model.backbone).__module__.startswith("ssm_plugins.")
    saved = torch.load(weights, map_location="cpu", weights_only=False)["state_dict"]
    state = inferencer.model.state_dict()
    assert set(state) == set(saved) and all(torch.equal(state[k], saved[k]) for k in state)
    result = inferencer(str(image), return_datasamples=True)
    width, height = Image.open(image).size
    if run.name == "mmdet":
        (sample,) = result["predictions"]
        boxes, masks = sample.pred_instances.bboxes, sample.pred_instances.masks
        assert boxes.shape[1:] == (4,) and tuple(masks.shape[1:]) == (height, width) and len(masks) == len(boxes)
    else:  # MMSegInferencer returns the one image's SegDataSample itself
        assert tuple(result.pred_sem_seg.data.shape) == (1, height, width)


# the Mask R-CNN case under exhaustive: test_resume.py's mid-epoch resume of the same detector checks more (weights)
@pytest.mark.parametrize("run, checkpoint", [pytest.param("mmdet_run", "epoch_2.pth", marks=pytest.mark.exhaustive),
                                             ("mmseg_run", "iter_8.pth")])
def test_mim_train_resume_continues_iterations_and_loss(run, checkpoint, request):
    run = request.getfixturevalue(run)
    # one more epoch / 4 more iterations, from the work dir's last checkpoint, without validating again
    succeeded(mim("train", run.name, run.config, run.work_dir, run.options(2, "train_cfg.val_begin=1000"),
                  "--resume"))
    first, resumed = logged_runs(run.work_dir)
    before, after = _train_losses(first), _train_losses(resumed)
    assert sorted(after) == [5, 6, 7, 8]
    # the optimiser state was restored: AdamW has taken 8 steps, not 4
    state = torch.load(run.work_dir / checkpoint, map_location="cpu", weights_only=False)["optimizer"]["state"]
    assert {float(s["step"]) for s in state.values()} == {8.0}
    if run.name == "mmdet":
        # the weights were restored: the loss goes on from where run 1 ended, far from a fresh model's first loss
        # (Mask R-CNN's classification loss halves in 4 iterations; UperNet's loss barely moves in 4 iterations,
        # its batch-to-batch noise is larger than its progress, so for mmseg the optimiser check above stands)
        assert abs(after[5] - before[4]) < abs(after[5] - before[1]), (before, after)
    assert all(0 < loss < 2 * before[1] for loss in after.values()), (before, after)
