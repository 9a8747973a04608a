"""Checks of the timm model contract shared by the per-family model tests."""
import torch


def assert_grad_checkpointing_is_exact(model, x, seed: int = 3):
    """Gradient checkpointing trades memory for recomputation: same output, same gradients, and the backward
    really re-runs forwards (counted with forward hooks, so a no-op set_grad_checkpointing fails)."""
    calls = []
    hooks = [m.register_forward_hook(lambda *args: calls.append(None)) for m in model.modules()]
    try:
        torch.manual_seed(seed)
        reference_out = model(x)
        reference_out.sum().backward()
        plain_calls = len(calls)
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        model.zero_grad()
        model.set_grad_checkpointing(True)
        calls.clear()
        torch.manual_seed(seed)
        out = model(x)
        out.sum().backward()
    finally:
        for hook in hooks:
            hook.remove()
    torch.testing.assert_close(out, reference_out)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=n)
    assert len(calls) > plain_calls, 'set_grad_checkpointing(True) recomputed nothing in the backward'


def assert_checkpoint_round_trip(name, kwargs, input_shape, tmp_path, wrap_in_state_dict: bool = False):
    """A saved model loads back, through timm's ``pretrained_cfg_overlay=dict(file=...)`` and through
    ``load_state_dict``, to the same weights and the same outputs."""
    import timm

    torch.manual_seed(1)
    source = timm.create_model(name, **kwargs).eval()
    path = tmp_path / 'checkpoint.pth'
    # wrap_in_state_dict: a training checkpoint, which the model's checkpoint filter unwraps
    torch.save({'state_dict': source.state_dict()} if wrap_in_state_dict else source.state_dict(), path)
    torch.manual_seed(2)
    loaded = timm.create_model(name, pretrained=True, pretrained_cfg_overlay=dict(file=str(path)), **kwargs).eval()
    for key, value in source.state_dict().items():
        assert torch.equal(loaded.state_dict()[key], value), key
    other = timm.create_model(name, **kwargs).eval()
    other.load_state_dict(source.state_dict())
    x = torch.randn(*input_shape)
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), source(x))
        torch.testing.assert_close(other(x), source(x))
