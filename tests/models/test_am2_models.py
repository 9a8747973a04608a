"""ActionMambaMixer / ActionQSMixer / the ActionFormer control (ssm_plugins.models.am2): the pyramid's shapes,
ActionFormer's centre-sampling assignment worked by hand, the 1-D DIoU loss and soft-NMS on worked examples, a
short fit that localises a generated action, and bad arguments named."""
import pytest
import torch

from ssm_plugins.models.am2 import LOCALIZATION_BLOCKS, ActionLocalizationMixer, diou_loss_1d, soft_nms_1d

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def _model(block="mambamixer", **kwargs):
    torch.manual_seed(0)
    return ActionLocalizationMixer(3, features_dim=8, seq_len=64, block=block, embed_dim=16, **kwargs)


@pytest.mark.parametrize("block", LOCALIZATION_BLOCKS)
def test_every_level_has_logits_and_distances(block):
    model = _model(block)
    logits, distances = model(torch.randn(2, 64, 8))
    assert [tuple(t.shape) for t in logits] == [(2, 64 // 2 ** l, 3) for l in range(6)]
    assert [tuple(t.shape) for t in distances] == [(2, 64 // 2 ** l, 2) for l in range(6)]
    assert all((d >= 0).all() for d in distances)
    # the classification bias starts at the prior 0.01 (ActionFormer), so the focal loss starts small
    assert torch.allclose(logits[0].sigmoid().mean(), torch.tensor(0.01), atol=0.01)


def test_centre_sampling_assigns_by_hand():
    model = _model()
    targets, distances, positive = model.assign(torch.tensor([[3.0, 10.0]]), torch.tensor([2]))
    pos, stride, _ = model.points()
    chosen = {(int(s), int(p)) for p, s in zip(pos[positive], stride[positive])}
    # centre 6.5, radius 1.5 strides: level 0 (range 0-4) takes steps 6 and 7 (farther reach 4); step 5 reaches
    # 5 > 4; level 1 (stride 2, range 4-8) takes 4, 6, 8 (reach 6, 4, 5); level 2 (stride 4, range 8-16) none
    assert chosen == {(1, 6), (1, 7), (2, 4), (2, 6), (2, 8)}
    assert targets[positive].argmax(1).eq(2).all() and targets[~positive].sum() == 0
    by_point = {(int(s), int(p)): d.tolist() for p, s, d in zip(pos[positive], stride[positive], distances[positive])}
    assert by_point[(1, 6)] == [3.0, 4.0] and by_point[(2, 4)] == [0.5, 3.0]  # in strides


def test_the_shorter_action_wins_a_shared_point():
    model = _model()
    targets, _, positive = model.assign(torch.tensor([[0.0, 48.0], [8.0, 40.0]]), torch.tensor([0, 1]))
    pos, stride, _ = model.points()
    # step 24 of level 3 (stride 8, range 16-32) is inside both, with reach 24 and 16
    shared = positive & (pos == 24) & (stride == 8)
    assert shared.sum() == 1 and targets[shared].argmax(1).item() == 1


def test_diou_loss_worked_examples():
    assert diou_loss_1d(torch.tensor([[2.0, 3.0]]), torch.tensor([[2.0, 3.0]])).item() == pytest.approx(0.0)
    # pred [-1, 1] against truth [-2, 2] from the same point: IoU 0.5, same centre
    assert diou_loss_1d(torch.tensor([[1.0, 1.0]]), torch.tensor([[2.0, 2.0]])).item() == pytest.approx(0.5)
    # pred [0, 2] against truth [-2, 0]: no overlap, centres 2 apart, enclosing 4: 1 - 0 + (2 / 4)^2
    assert diou_loss_1d(torch.tensor([[0.0, 2.0]]), torch.tensor([[2.0, 0.0]])).item() == pytest.approx(1.25)


def test_soft_nms_decays_overlaps_of_the_same_class_only():
    segments = torch.tensor([[0.0, 10.0], [0.0, 10.0], [0.0, 10.0], [20.0, 30.0]])
    scores = torch.tensor([0.9, 0.8, 0.7, 0.5])
    labels = torch.tensor([0, 0, 1, 0])
    kept, kept_scores, kept_labels = soft_nms_1d(segments, scores, labels, sigma=0.5, max_segments=10, min_score=1e-3)
    decay = torch.exp(torch.tensor(-1.0 / 0.5)).item()  # tIoU 1 with the kept 0.9 segment
    assert kept_scores.tolist() == pytest.approx([0.9, 0.7, 0.5, 0.8 * decay])  # best first
    assert kept_labels.tolist() == [0, 1, 0, 0] and kept[3].tolist() == [0.0, 10.0]
    assert len(soft_nms_1d(segments, scores, labels, 0.5, max_segments=2, min_score=1e-3)[0]) == 2


@pytest.mark.parametrize("block", ["mambamixer", "attention"])
def test_a_short_fit_localises_a_generated_action(block):
    torch.manual_seed(0)
    model = _model(block, drop_path=0.0)
    x = torch.randn(8, 64, 8) * 0.3
    segments, labels = [], []
    for b in range(8):  # one action per video: channel (label) raised over [start, start + 16)
        start, label = 4 + 6 * b, b % 3
        x[b, start:start + 16, label] += 3.0
        segments.append(torch.tensor([[float(start), float(start + 16)]]))
        labels.append(torch.tensor([label]))
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        loss = model.loss(model(x), segments, labels)["total"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    hits = 0
    for (seg, lab, _), truth, label in zip(model.predict(model(x)), segments, labels):
        inter = (torch.min(seg[0, 1], truth[0, 1]) - torch.max(seg[0, 0], truth[0, 0])).clamp(min=0)
        union = (seg[0, 1] - seg[0, 0]) + 16 - inter
        hits += int(lab[0] == label[0] and inter / union >= 0.5)
    assert hits >= 6, hits  # the top segment of most videos is the action, at tIoU >= 0.5


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="block"):
        ActionLocalizationMixer(3, block="lstm")
    with pytest.raises(ValueError, match="seq_len must be divisible by 2\\^5"):
        ActionLocalizationMixer(3, seq_len=100)
    with pytest.raises(ValueError, match="arch must be"):
        ActionLocalizationMixer(3, arch=(2, 2, 6))
    with pytest.raises(ValueError, match="x must have shape \\(batch, seq_len=64, features_dim=8\\)"):
        _model()(torch.randn(1, 32, 8))


def test_channel_mixer_false_drops_it_from_every_block():
    with_mixer, without = _model(), _model(channel_mixer=False)
    assert all(block.channel_mixer is not None for block in [*with_mixer.stem, *with_mixer.branch])
    assert all(block.channel_mixer is None for block in [*without.stem, *without.branch])
    assert sum(p.numel() for p in without.parameters()) < sum(p.numel() for p in with_mixer.parameters())
    assert [tuple(t.shape) for t in without(torch.randn(1, 64, 8))[0]] == [(1, 64 // 2 ** l, 3) for l in range(6)]
