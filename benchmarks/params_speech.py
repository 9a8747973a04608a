"""Parameter counts of the WSJ0-2mix separation recipes at full size, next to the MambaMixer paper's Table 11.

    .venv/bin/python -m benchmarks.params_speech

Builds every ``recipes_speech/WSJ0Mix/separation/hparams/*.yaml`` as the recipe does (hyperpyyaml, no data
needed) and counts the parameters of encoder + mask net + decoder. Table 11 (arXiv:2403.19888 v2, App. H.5) gives
MambaMixer 15M (SI-SNRi 22.7 dB, SDRi 22.9) and QSMixer 15M (22.4, 22.7); DPMamba-M 15.9M for reference. The
eSSM and Myo papers report no speech separation; their recipes use DPMamba-M's layout.
"""
from __future__ import annotations

import argparse
import glob
import os
import tempfile

from ._common import add_write_readme, readme_section, table

HPARAMS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           "recipes_speech", "WSJ0Mix", "separation", "hparams")
# Table 11 (MambaMixer v2, App. H.5): params (M), SI-SNRi (dB), SDRi (dB)
PAPER = {"mambamixer": (15.0, 22.7, 22.9), "qsmixer": (15.0, 22.4, 22.7)}


def recipe_params(hparams_file: str) -> dict:
    """{module name: parameters} of a separation hparams file built at its own (full) size."""
    from hyperpyyaml import load_hyperpyyaml

    with tempfile.TemporaryDirectory() as tmp, open(hparams_file, encoding="utf-8") as f:
        hparams = load_hyperpyyaml(f, {"data_folder": tmp, "output_folder": tmp})
        return {name: sum(p.numel() for p in module.parameters()) for name, module in hparams["modules"].items()}


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hparams", nargs="*", default=sorted(glob.glob(os.path.join(HPARAMS_DIR, "*.yaml"))))
    add_write_readme(parser)
    args = parser.parse_args(argv)
    rows = []
    for path in args.hparams:
        name = os.path.splitext(os.path.basename(path))[0]
        counts = recipe_params(path)
        total = sum(counts.values()) / 1e6
        paper = PAPER.get(name)
        rows.append({"recipe": name, "params_M": round(total, 2), "masknet_M": round(counts["masknet"] / 1e6, 2),
                     "paper_params_M": paper[0] if paper else None,
                     "vs_paper_%": round(100 * (total / paper[0] - 1), 1) if paper else None,
                     "paper_si_snri_dB": paper[1] if paper else None, "paper_sdri_dB": paper[2] if paper else None})
    headers = list(rows[0])
    with readme_section("benchmarks.params_speech", args.write_readme, argv):
        print(table(headers, [[("-" if r[h] is None else r[h]) for h in headers] for r in rows]))
    return rows


if __name__ == "__main__":
    main()
