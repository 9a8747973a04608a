"""Deploying the models outside PyTorch eager: ``torch.export`` and ONNX, through torch's own calls.

    import ssm_plugins  # registers what torch.onnx needs (ssm_plugins._onnx), on the first ONNX export
    program = torch.export.export(model.eval(), (torch.randn(2, 3, 224, 224),))
    onnx_program = torch.onnx.export(model.eval(), (torch.randn(2, 3, 224, 224),), "model.onnx", dynamo=True)
    # or torch.onnx.export(program, f="model.onnx", dynamo=True); export_onnx below: the same, batch dynamic

``torch.export`` keeps our custom ops (``torch.ops.ssm_plugins.*``, with their fake kernels) in the graph, so an
ExportedProgram runs our C++/CUDA kernels wherever ``ssm_plugins`` is imported (AOTInductor included); the Myo
solve is the exception, traced as aten ops (``ops.myo.myo_solve``: its op sees the tree only as ``parent``'s
values, the trace sees its level sizes as Python ints). ONNX has no such ops: torch's exporter rewrites each
forward op into standard aten ops with ``decompositions()`` (the package's pure-PyTorch oracles where they are
graph-friendly: FFT convolutions as rfft/irfft, the 2-D SSM kernel; the eSSM kernel in real arithmetic; the S6 /
QS scans as a chunked closed form, ``linear_recurrence``, L/32 steps instead of L), which ``ssm_plugins._onnx``
puts in its decomposition table. What depends on the weights only (the eSSM discretisation, the S4ND kernel, the
Myo edge weights: complex arithmetic) is translated as real pairs (``ssm_plugins._onnx_complex`` adds the complex
ops torchlib lacks) and folded by the exporter's optimizer. The decompositions are used only during export; the
exported graph runs in onnxruntime and matches PyTorch within the tolerances ``tests/test_export.py`` states.
``fold_weight_only`` folds such values in an FX graph for backends without an optimizer of their own.
"""
from __future__ import annotations

from typing import Callable, Dict, Optional

import torch

from .ops import reference
from .ops.reference.selective_scan import scan_inputs
from .ops.selective_scan import STATE_EVERY, saved_states

__all__ = ["decompositions", "export_program", "export_onnx", "fold_weight_only"]


def linear_recurrence(log_a: torch.Tensor, b: torch.Tensor, chunk: int = 32) -> torch.Tensor:
    """All states of h_t = exp(log_a_t) ⊙ h_{t-1} + b_t, h_0 = 0, along dim 2 of (batch, heads, L, state).

    Chunked closed form (ONNX-friendly: L/chunk steps instead of L): inside a chunk with P = cumsum(log_a),
    h_t = exp(P_t) h_start + Σ_{s<=t} exp(P_t - P_s) b_s; log_a <= 0 (decays), so every exponent is <= 0.
    """
    batch, heads, length = b.shape[:3]
    h = b.new_zeros(batch, heads, *b.shape[3:])
    states = []
    for start in range(0, length, chunk):
        la, bb = log_a[:, :, start:start + chunk], b[:, :, start:start + chunk]
        size = bb.shape[2]
        P = torch.cumsum(la, dim=2)  # (batch, heads, c, state)
        causal = torch.ones(size, size, dtype=torch.bool, device=b.device).tril()
        causal = causal.view(1, 1, size, size, *([1] * (b.dim() - 3)))
        gaps = P.unsqueeze(3) - P.unsqueeze(2)  # [t, s] = P_t - P_s
        weights = torch.exp(torch.where(causal, gaps, torch.full_like(gaps, float("-inf"))))
        chunk_states = (weights * bb.unsqueeze(2)).sum(3) + torch.exp(P) * h.unsqueeze(2)
        states.append(chunk_states)
        h = chunk_states[:, :, -1]
    return torch.cat(states, dim=2)


def _selective_scan_fwd(u, delta, A, B, C, D=None, z=None, delta_bias=None, delta_softplus=False, delta_proj=None,
                        reverse=False):
    """The S6 scan via linear_recurrence: the op's out, last state and saved states (ops.selective_scan)."""
    length = u.shape[-1]
    boundaries = STATE_EVERY * torch.arange(1, saved_states(length) + 1, device=u.device)  # before step 1024 s
    if reverse:  # the scan of the flipped inputs: boundary s comes after flipped step length - 1 - 1024 s
        flip = (lambda t: None if t is None else t.flip(-1))
        out, h = _scan_states(flip(u), flip(delta), A, flip(B), flip(C), D, flip(z), delta_bias, delta_softplus,
                              delta_proj)
        return out.flip(-1), h[:, :, -1], h[:, :, length - 1 - boundaries]
    out, h = _scan_states(u, delta, A, B, C, D, z, delta_bias, delta_softplus, delta_proj)
    return out, h[:, :, -1], h[:, :, boundaries - 1]


def _scan_states(u, delta, A, B, C, D, z, delta_bias, delta_softplus, delta_proj):
    """The forward scan's output and its states after every step, (batch, dim, L, N)."""
    acc, x, dt, Bm, Cm = scan_inputs(u, delta, B, C, delta_bias, delta_softplus, delta_proj)
    batch, dim, length = u.shape
    groups, n_state = Bm.shape[1], A.shape[1]

    def per_channel(m):  # (batch, groups, N, L) -> (batch, dim, L, N)
        m = m.transpose(-1, -2)[:, :, None].expand(batch, groups, dim // groups, length, n_state)
        return m.reshape(batch, dim, length, n_state)

    log_a = dt[..., None] * A.to(acc)[:, None, :]  # (batch, dim, L, N)
    h = linear_recurrence(log_a, (dt * x)[..., None] * per_channel(Bm))
    y = (h * per_channel(Cm)).sum(-1)
    if D is not None:
        y = y + D.to(acc)[:, None] * x
    if z is not None:
        y = y * torch.nn.functional.silu(z.to(acc))
    return y.to(u.dtype), h


def _strict_scan(x, delta, A, B, C, hydra_shift):
    """``ops.reference.qs_mix``'s strict scan via linear_recurrence: x (batch, L, H, P), delta (batch, L, H),
    A (H, N) or (H, 1), B, C (batch, L, H, N). exact: y_t = C_t·h_t - (C_t·B_t) Δ_t x_t; hydra: y_t = C_{t-1}·h_{t-1}."""
    batch, length, heads, feat = x.shape
    n_state = B.shape[-1]
    dt = delta.transpose(1, 2)  # (batch, H, L)
    log_a = (dt[..., None] * A[None, :, None, :]).expand(batch, heads, length, n_state)
    log_a = log_a[..., None].expand(-1, -1, -1, -1, feat).reshape(batch, heads, length, n_state * feat)
    Bt, Ct, xt = B.transpose(1, 2), C.transpose(1, 2), x.transpose(1, 2)  # (batch, H, L, ·)
    b = ((dt[..., None] * Bt)[..., None] * xt[..., None, :]).reshape(batch, heads, length, n_state * feat)
    h = linear_recurrence(log_a, b).view(batch, heads, length, n_state, feat)
    out = torch.einsum("bhln,bhlnp->bhlp", Ct, h)
    if hydra_shift:
        out = torch.cat([torch.zeros_like(out[:, :, :1]), out[:, :, :-1]], dim=2)
    else:
        out = out - ((Ct * Bt).sum(-1) * dt)[..., None] * xt
    return out.transpose(1, 2)


def _qs_mix_fwd(x, dt, A, B, C, dt_rev, A_rev, B_rev, C_rev, gamma, dt_bias=None, dt_bias_rev=None,
                dt_softplus=False, hydra_shift=False):
    """y = S_strict(x) + flip(S'_strict(flip x)) + γ ⊙ x, as ``ops.reference.qs_mix``."""
    from .ops.reference.qs_mix import prepare_inputs

    xs, delta, A, B, C = prepare_inputs(x, dt, A, B, C, dt_bias, dt_softplus)
    _, delta_rev, A_rev, B_rev, C_rev = prepare_inputs(x, dt_rev, A_rev, B_rev, C_rev, dt_bias_rev, dt_softplus)
    flip = lambda t: t.flip(1)  # noqa: E731  (reverses the sequence axis)
    lower = _strict_scan(xs, delta, A, B, C, hydra_shift)
    upper = flip(_strict_scan(flip(xs), flip(delta_rev), A_rev, flip(B_rev), flip(C_rev), hydra_shift))
    return (lower + upper + gamma.to(xs.dtype)[..., None] * xs).to(x.dtype)


def _ssm2d_kernel_fwd(A, B, C, height, width):
    return reference.ssm2d_kernel(A, B, C, height, width)


def _fft_conv2d(x, kernel, origin_h, origin_w):
    return reference.fft_conv2d(x, kernel, (origin_h, origin_w))


def _essm_kernel(g_re, g_im, z_re, z_im, L, n_fft, bidirectional):
    """k_j = Re(g e^{jz}) = e^{j Re z} (Re g cos(j Im z) - Im g sin(j Im z)), packed as the op does (real
    arithmetic: ONNX has no complex tensors)."""
    lags = torch.arange(L, dtype=g_re.dtype, device=g_re.device)
    decay = torch.exp(z_re[..., None] * lags)
    angle = z_im[..., None] * lags
    k = decay * (g_re[..., None] * torch.cos(angle) - g_im[..., None] * torch.sin(angle))
    packed = torch.nn.functional.pad(k, (0, n_fft - L))
    if bidirectional:
        packed = packed + torch.nn.functional.pad(torch.flip(k, (-1,)), (n_fft - L, 0))
    return packed


def _myo_solve_fwd(u, b, parent, b_index=None, skew=False):
    # reads parent's values (the waves): for eager use; torch.export traces ops.myo.myo_solve's level schedule
    return reference.myo_solve(u, b, parent, b_index, skew)


_FORWARD_OPS = {
    "selective_scan_fwd": _selective_scan_fwd,
    "qs_mix_fwd": _qs_mix_fwd,
    "ssm2d_kernel_fwd": _ssm2d_kernel_fwd,
    "fft_conv2d": _fft_conv2d,
    "essm_kernel": _essm_kernel,
    "myo_solve_fwd": _myo_solve_fwd,
}


def decompositions() -> Dict[torch._ops.OpOverload, Callable]:
    """{torch.ops.ssm_plugins.<forward op>.default: its composition of aten ops}, for
    ``ExportedProgram.run_decompositions`` (every forward op the extension registers; a missing one is skipped)."""
    table = {}
    for name, fn in _FORWARD_OPS.items():
        packet = getattr(torch.ops.ssm_plugins, name, None)
        if packet is not None:
            table[packet.default] = _contiguous_outputs(fn)
    return table


def _contiguous_outputs(fn: Callable) -> Callable:
    """fn with contiguous tensor outputs, the layout the ops' fake kernels declare for contiguous inputs: the traced
    graph may already hold views that rely on it (a ``reshape`` of the op's output traced as ``view``)."""
    def contiguous_fn(*args, **kwargs):
        out = fn(*args, **kwargs)
        if isinstance(out, tuple):
            return tuple(t.contiguous() if isinstance(t, torch.Tensor) else t for t in out)
        return out.contiguous()

    contiguous_fn.__name__ = contiguous_fn.__qualname__ = fn.__name__
    contiguous_fn.__doc__ = fn.__doc__
    return contiguous_fn


def _dynamic_batch(example: torch.Tensor, dynamic_batch: bool):
    if not dynamic_batch:
        return None
    return ({0: torch.export.Dim("batch", min=1, max=1024)},)


def _batch_of_two(model: torch.nn.Module, example: torch.Tensor) -> torch.Tensor:
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(example, torch.Tensor) or example.dim() != 4:
        got = tuple(example.shape) if isinstance(example, torch.Tensor) else type(example).__name__
        raise ValueError(f"example must be a (batch, channels, H, W) tensor, got {got}")
    # a batch of 1 would be specialised by torch.export (0/1 specialisation): trace at batch 2
    return example[:1].expand(2, *example.shape[1:]).contiguous() if example.shape[0] == 1 else example


def export_program(model: torch.nn.Module, example: torch.Tensor, dynamic_batch: bool = True,
                   decompose: bool = False) -> torch.export.ExportedProgram:
    """``torch.export.export`` of an image model (call ``model.eval()`` first) on ``example`` (B, C, H, W), the
    batch dimension dynamic. ``decompose``: replace our custom ops by standard aten ops (``decompositions()``)."""
    example = _batch_of_two(model, example)
    program = torch.export.export(model, (example,), dynamic_shapes=_dynamic_batch(example, dynamic_batch))
    return program.run_decompositions(decompositions()) if decompose else program


def fold_weight_only(module: torch.fx.GraphModule) -> None:
    """Replace, in place, every value of ``module``'s graph that depends on its weights and not on its input by a
    constant: e.g. the eSSM discretisation, the 2-D SSM and S4ND kernels, the Myo edge weights (complex arithmetic,
    which ONNX cannot hold, and work an inference graph need not repeat). Unlike inductor's ``constant_fold`` this
    folds through constructors (``arange``: S4ND's channel -> group index, Myo's level steps); values made of
    constructors alone stay in the graph, small ops rather than large constants."""
    from torch._inductor.constant_folding import ConstantFolder, replace_node_with_constant

    # dtype checks of the trace (``.to`` of a tensor already of that dtype) would keep folded values alive
    for node in list(module.graph.find_nodes(op="call_function", target=torch.ops.aten._assert_tensor_metadata.default)):
        module.graph.erase_node(node)
    weight_dependent = set()
    for node in module.graph.nodes:
        if node.op == "get_attr" or any(arg in weight_dependent for arg in node.all_input_nodes):
            weight_dependent.add(node)
    with torch.utils._python_dispatch._disable_current_modes():
        folder = ConstantFolder(module, skip_constructors=False)
        folder.run()
        for node, value in folder.node_replacements.items():
            if node in weight_dependent:
                replace_node_with_constant(module, node, value)
    module.graph.eliminate_dead_code()
    for node in list(module.graph.find_nodes(op="get_attr")):  # the weights folded away
        if not node.users:
            module.graph.erase_node(node)
            if hasattr(module, node.target) and "." not in node.target:
                delattr(module, node.target)
    module.graph.lint()
    module.recompile()


def export_onnx(model: torch.nn.Module, example: torch.Tensor, path: Optional[str] = None,
                dynamic_batch: bool = True, opset_version: int = 18, optimize: bool = True):
    """``torch.onnx.export(model, (example,), path, dynamo=True)`` of an image model with the batch dynamic, input
    name 'x', output 'logits'. Returns the ``torch.onnx.ONNXProgram`` (saved to ``path`` when given)."""
    example = _batch_of_two(model, example)
    return torch.onnx.export(model, (example,), None if path is None else str(path), input_names=["x"],
                             output_names=["logits"], dynamic_shapes=_dynamic_batch(example, dynamic_batch),
                             dynamo=True, opset_version=opset_version, optimize=optimize, verbose=False)
