#!/usr/bin/env python3
"""eSSM paper Figs. 8-9 from a trained run: the learned eigenvalues λ and step sizes Δ of every eSSM layer.

Fig. 8: one panel per layer, Re λ on the x-axis, arcsinh(Im λ) on the y-axis, the HiPPO initialisation as black
dots. Fig. 9: log Δ on the x-axis, the layer on the y-axis (eSSM, arXiv 2402.15290, Sec. 5.9). Re λ is the one the
forward uses, min(θ_re, -ε) (``ESSM.lambda_re``).

    python plot_essm_parameters.py results/essm_listops/<seed>/save --out figures/
    python plot_essm_parameters.py results/essm_listops/<seed>/save/CKPT+... --no-conj-sym

The argument is the run's ``save`` folder (the checkpoint with the lowest validation error, as train.py tests it,
found by SpeechBrain's Checkpointer), one ``CKPT+...`` folder or its ``model.ckpt``. Prints one line per layer
and writes ``essm_eigenvalues.png`` and ``essm_log_dt.png``. ``--conj-sym`` / ``--init`` / ``--real-clip`` are the
layers' options (the hparams file's; the defaults are ``ESSM``'s); they set the HiPPO dots and ε.
"""
from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Dict, List, Optional

import torch

from ssm_plugins.layers.essm import INITS, hippo_diagonal_init


def checkpoint_file(path: Path) -> Path:
    """The model's parameter file: ``path`` itself, that of a ``CKPT+...`` folder, or that of the best checkpoint of
    a ``save`` folder."""
    path = Path(path)
    if path.is_file():  # model.ckpt itself
        return path
    if (path / "model.ckpt").is_file():
        return path / "model.ckpt"
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint: {path} does not exist (expected a save folder, a CKPT+... folder or "
                                "its model.ckpt)")
    from speechbrain.utils.checkpoints import Checkpointer

    found = Checkpointer(path).find_checkpoint(min_key="error_rate")
    if found is None or "model" not in found.paramfiles:
        raise FileNotFoundError(f"checkpoint: no SpeechBrain checkpoint with a model in {path} (expected CKPT+.../"
                                "model.ckpt, as the LRA and sequential-image recipes write them)")
    return Path(found.paramfiles["model"])


def essm_layers(state: Dict[str, torch.Tensor], real_clip: float) -> List[dict]:
    """Every eSSM layer of a state_dict, in its order: name, λ (complex, heads flattened) and log Δ."""
    layers = []
    for key in state:
        if not key.endswith("Lambda_re"):
            continue
        prefix = key[:-len("Lambda_re")]
        missing = [name for name in ("Lambda_im", "log_dt") if prefix + name not in state]
        if missing:
            raise KeyError(f"checkpoint: {prefix}Lambda_re has no {', '.join(prefix + m for m in missing)}")
        real = state[key].double().clamp(max=-real_clip)
        layers.append({"name": prefix.rstrip("."), "n": state[key].shape[-1],
                       "lambda": torch.complex(real, state[prefix + "Lambda_im"].double()).flatten(),
                       "log_dt": state[prefix + "log_dt"].double().flatten()})
    if not layers:
        raise KeyError("checkpoint: no eSSM layer (no parameter named *.Lambda_re)")
    return layers


def plot(layers: List[dict], init: torch.Tensor, out: Path) -> List[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    cols = min(4, len(layers))
    rows = math.ceil(len(layers) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 3.0 * rows), squeeze=False)
    for ax, layer in zip(axes.flat, layers):
        lam = layer["lambda"]
        ax.scatter(lam.real, torch.asinh(lam.imag), s=6, alpha=0.6, label="trained")
        ax.scatter(init.real, torch.asinh(init.imag), s=6, c="black", label="HiPPO init")
        ax.set_title(layer["name"], fontsize=8)
        ax.set_xlabel("Re λ")
        ax.set_ylabel("arcsinh(Im λ)")
    for ax in list(axes.flat)[len(layers):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    eigen = out / "essm_eigenvalues.png"
    fig.savefig(eigen, dpi=120)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 0.5 * len(layers) + 1.5))
    for i, layer in enumerate(layers):
        ax.scatter(layer["log_dt"], torch.full_like(layer["log_dt"], i), s=6, alpha=0.6)
    ax.set_yticks(range(len(layers)), [layer["name"] for layer in layers], fontsize=7)
    ax.set_xlabel("log Δ")
    fig.tight_layout()
    steps = out / "essm_log_dt.png"
    fig.savefig(steps, dpi=120)
    plt.close(fig)
    return [eigen, steps]


def main(argv: Optional[List[str]] = None) -> List[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="the run's save folder, one CKPT+... folder, or its model.ckpt")
    parser.add_argument("--out", type=Path, default=Path("."), help="folder for the two PNGs")
    parser.add_argument("--conj-sym", action=argparse.BooleanOptionalAction, default=True,
                        help="the layers' conj_sym (HiPPO at size 2n); default: ESSM's")
    parser.add_argument("--init", choices=INITS, default="paper", help="the layers' init (for the HiPPO dots)")
    parser.add_argument("--real-clip", type=float, default=1e-4, help="ε of Re λ = min(θ_re, -ε); default: ESSM's")
    args = parser.parse_args(argv)
    if not args.real_clip > 0:
        parser.error(f"--real-clip must be > 0, got {args.real_clip}")

    path = checkpoint_file(args.checkpoint)
    layers = essm_layers(torch.load(path, map_location="cpu", weights_only=True), args.real_clip)
    sizes = {layer["n"] for layer in layers}
    if len(sizes) != 1:
        raise ValueError(f"checkpoint: the layers have different numbers of modes per head {sorted(sizes)}")
    init = hippo_diagonal_init(sizes.pop(), args.conj_sym, args.init)[0].to(torch.complex128)
    print(f"{path}: {len(layers)} eSSM layers")
    for layer in layers:
        lam, log_dt = layer["lambda"], layer["log_dt"]
        layer.update(re_min=lam.real.min().item(), re_max=lam.real.max().item(),
                     log_dt_min=log_dt.min().item(), log_dt_max=log_dt.max().item())
        print(f"{layer['name']}: {lam.numel()} modes, Re λ in [{layer['re_min']:.3g}, {layer['re_max']:.3g}], "
              f"log Δ in [{layer['log_dt_min']:.3g}, {layer['log_dt_max']:.3g}]")
    for png in plot(layers, init, args.out):
        print("wrote", png)
    return layers


if __name__ == "__main__":
    main()
