"""Checks of the timm model contract shared by the per-family model tests."""
import torch


def assert_grad_checkpointing_is_exact(model, x, seed: int = 3):
    """Gradient checkpointing trades memory for recomputation: same output, same gradients."""
    torch.manual_seed(seed)
    reference_out = model(x)
    reference_out.sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    model.set_grad_checkpointing(True)
    torch.manual_seed(seed)
    out = model(x)
    out.sum().backward()
    torch.testing.assert_close(out, reference_out)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=n)
