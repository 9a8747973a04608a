"""Kernel benchmarks: compiled kernels vs PyTorch references, ratios measured in one run.

    .venv/bin/python -m benchmarks.ops            # full sizes (issue figures)
    .venv/bin/python -m benchmarks.ops --quick    # small sizes, a smoke run

Each ``benchmarks/ops_<op>.py`` provides ``run(quick) -> list of rows``
(op, case, baseline name, baseline s, ours s, speed-up); this script prints them as one table.
"""
from __future__ import annotations

import argparse
import importlib
import pkgutil

import torch

from benchmarks._common import add_write_readme, readme_section, table

import benchmarks


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes for a smoke run")
    parser.add_argument("--only", default=None, help="run only benchmarks/ops_<ONLY>.py")
    add_write_readme(parser)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    with readme_section("benchmarks.ops", args.write_readme, argv):
        print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
        rows = []
        for mod in sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__) if m.name.startswith("ops_")):
            if args.only and mod != f"ops_{args.only}":
                continue
            rows += importlib.import_module(f"benchmarks.{mod}").run(args.quick)
        print(table(["op", "case", "baseline", "baseline s", "ours s", "speed-up"], rows))


if __name__ == "__main__":
    main()
