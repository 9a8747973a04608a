#!/usr/bin/env python
"""timm's own model test suite (``tests/test_models.py`` of the pinned timm's sdist) run against our models.

    python scripts/timm_test_suite.py fetch            # download the sdist once, keep its tests/ in the cache
    python scripts/timm_test_suite.py run [pytest args] # adapt the model selection, run pytest on it
    python scripts/timm_test_suite.py run --exclude 'REGEX' [pytest args]  # leave out the models it matches

``fetch`` runs ``pip download --no-deps --no-binary :all: timm==<pin>`` (the pin from requirements/lock.txt) and
keeps the sdist's ``tests/`` under ``$SSM_PLUGINS_CACHE`` (default ``~/.cache/ssm_plugins``), keyed by the version
like the mmcv wheel; once cached nothing touches the network. ``run`` writes an adapted copy of
``test_models.py`` whose only changes are the model selection (checked by ``tests/timm_suite``: every function and
every other statement is byte-for-byte timm's):

  * ``list_models`` / ``list_pretrained`` return only the models ssm_plugins registers;
  * timm's own filter lists gain the entries of ``FILTERS`` below, each with its one-line reason;
  * a generated ``conftest.py`` deselects the tests that name timm's own models (hard-coded model lists, or no
    model at all): they test timm's code, not ours.
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SUITE_FILE = "test_models.py"

# (timm filter list, entries, one-line reason). '+' appends to the list, '-' removes entries from it.
# Module names are the last component of each model file (timm's ``list_models(module=...)``).
OUR_MODULES = ["vim2", "svim2", "ssm2d", "mega", "essm", "myo"]
FILTERS = [
    ("EXCLUDE_FILTERS", "+", ["essm_retrieval*", "myo_listops", "tsm2", "tsqs"],
     "not image models: token-id pairs / token ids / time series (no image input_size), timm's tests feed images"),
    ("EXCLUDE_FILTERS", "+", ["essm_text*"],
     "one-hot bytes as (257, 1, L) 'images': timm shrinks every input dim to its target size, the 257-token "
     "vocabulary too, which no byte model can take (ListOps' 17 tokens fit; tests/models cover Text)"),
    ("EXCLUDE_FILTERS", "+", ["essm_scifar_tiny"],
     "2 blocks, so 2 feature levels: timm's feature tests need >= 3 (one module-wide list selects them)"),
    ("FEAT_INTER_FILTERS", "+", OUR_MODULES,
     "every model file implements forward_intermediates / prune_intermediate_layers (timm's FeatureGetterNet)"),
    ("NON_STD_FILTERS", "+",
     ["vim2_*", "viqs_*", "svim2_*", "sviqs_*", "essm_listops*", "essm_lra*", "essm_pathfinder*", "essm_pathx*",
      "essm_psmnist*", "essm_scifar*", "essm_smnist*", "essm_text*", "myo_*", "myopix_*"],
     "token-sequence models with (B, L, C) features, like timm's ViTs (timm's own filter for them)"),
    # TorchScript (deprecated in torch 2.11; timm keeps scripting tests): none of our model files script
    ("EXCLUDE_JIT_FILTERS", "+", ["vim2_*", "viqs_*"],
     "TorchScript: ViM2/ViQS forward uses closures, lambdas, properties and per-sample scan gathers"),
    ("EXCLUDE_JIT_FILTERS", "+", ["svim2_*", "sviqs_*", "*_ssm2d", "mega_*"],
     "TorchScript: layers.ssm2d.SSM2D / layers.mambamixer blocks do not script (Can't redefine method forward)"),
    ("EXCLUDE_JIT_FILTERS", "+", ["essm_*", "myo*"],
     "TorchScript: layers.essm uses comprehension ifs, layers.myo bare tuple annotations"),
    ("EXCLUDE_FEAT_FILTERS", "-", ["vim2_*", "viqs_*"],
     "ViM2/ViQS have a 4-level feature pyramid (dense_outputs; the *_noconv ablations: their blocks), so "
     "features_only applies to them"),
]


def pinned_version(package: str = "timm") -> str:
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        match = re.match(rf"^{re.escape(package)}==(\S+)", line)
        if match:
            return match.group(1)
    raise SystemExit(f"{package} is not pinned in requirements/lock.txt")


def cache_dir() -> Path:
    base = os.environ.get("SSM_PLUGINS_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "ssm_plugins")
    return Path(base) / "timm-tests"


def fetch(version: str | None = None, python: str = sys.executable) -> Path:
    """The cached ``tests/`` folder of timm's sdist (downloaded once; offline afterwards)."""
    version = version or pinned_version()
    target = cache_dir() / f"timm-{version}"
    if (target / "tests" / SUITE_FILE).is_file():
        return target / "tests"
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        subprocess.run([python, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                        f"timm=={version}", "-d", tmp], check=True)
        sdist = Path(tmp) / f"timm-{version}.tar.gz"
        staging = Path(tmp) / "staging"
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers()
                       if m.isfile() and m.name.startswith(f"timm-{version}/tests/")]
            tar.extractall(staging, members=members, filter="data")
        shutil.copy2(sdist, staging / f"timm-{version}")  # keep the sdist itself beside its tests
        if target.exists():
            shutil.rmtree(target)
        (staging / f"timm-{version}").rename(target)
    return target / "tests"


# ---- adapting the selection ------------------------------------------------------------------------------------

_SELECTION_HEADER = '''
# ---- ssm_plugins: model selection (scripts/timm_test_suite.py; the only changes to this file) ----
import ssm_plugins as _ssm_plugins  # noqa: E402  registers the models
_SSM_MODELS = frozenset(n for n in timm.list_models()
                        if timm.models.model_entrypoint(n).__module__.startswith('ssm_plugins.'))


def _ssm_only(names):
    return [n for n in names if n.split('.')[0] in _SSM_MODELS]


def list_models(*args, **kwargs):
    return _ssm_only(timm.list_models(*args, **kwargs))


def list_pretrained(*args, **kwargs):
    return _ssm_only(timm.list_pretrained(*args, **kwargs))
# ---- end of ssm_plugins model selection ----
'''

CONFTEST = '''"""Generated by scripts/timm_test_suite.py: keep only the tests parametrised by one of our models (less
those matching $SSM_TIMM_SUITE_EXCLUDE, a regular expression: `run --exclude`)."""
import os
import re

import timm


def pytest_collection_modifyitems(config, items):
    import ssm_plugins  # noqa: F401
    ours = {n for n in timm.list_models() if timm.models.model_entrypoint(n).__module__.startswith('ssm_plugins.')}
    exclude = os.environ.get('SSM_TIMM_SUITE_EXCLUDE')
    if exclude:
        ours = {n for n in ours if not re.search(exclude, n)}
    keep, drop = [], []
    for item in items:
        spec = getattr(item, 'callspec', None)
        name = spec.params.get('model_name') if spec is not None else None
        (keep if isinstance(name, str) and name.split('.')[0] in ours else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep
'''

PYTEST_INI = '''[pytest]
markers =
    base: timm marker
    forward: timm marker
    backward: timm marker
    cfg: timm marker
    cfg_nonstd: timm marker
    torchscript: timm marker
    features: timm marker
    fxforward: timm marker
    fxbackward: timm marker
    timeout(seconds): pytest-timeout's marker (the plugin is not installed here)
'''


def _filter_lines(name: str, indent: str) -> list[str]:
    lines = []
    for target, op, entries, reason in FILTERS:
        if target != name:
            continue
        lines.append(f"{indent}# ssm_plugins: {reason}")
        if op == "+":
            lines.append(f"{indent}{name} = {name} + {entries!r}")
        else:
            lines.append(f"{indent}{name} = [f for f in {name} if f not in {entries!r}]")
    return lines


def _stores(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def adapt(source: str) -> str:
    """timm's test file with only the model selection changed (see the module docstring)."""
    tree = ast.parse(source)
    lines = source.splitlines()
    inserts: dict[int, list[str]] = {}  # after line number (1-based) -> lines
    anchor = next(n for n in tree.body if isinstance(n, ast.ImportFrom) and n.module == "timm.models"
                  and any(a.name == "get_notrace_modules" for a in n.names))
    inserts.setdefault(anchor.end_lineno, []).extend(_SELECTION_HEADER.splitlines())
    targets = {t for t, *_ in FILTERS}
    for name in targets:
        last = None  # (statement after which to insert, indentation)
        for node in tree.body:
            if name not in _stores(node):
                continue
            if isinstance(node, ast.If) and any(isinstance(n, ast.FunctionDef) for n in node.body):
                inner = [n for n in node.body if name in _stores(n)][-1]
                last = (inner, " " * inner.col_offset)
            else:
                last = (node, "")
        if last is None:
            raise ValueError(f"timm's {SUITE_FILE} no longer defines {name}: update FILTERS")
        node, indent = last
        inserts.setdefault(node.end_lineno, []).extend(_filter_lines(name, indent))
    out = []
    for number, line in enumerate(lines, 1):
        out.append(line)
        out.extend(inserts.get(number, ()))
    return "\n".join(out) + "\n"


def write_adapted(tests_dir: Path, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / SUITE_FILE).write_text(adapt((tests_dir / SUITE_FILE).read_text()))
    (out_dir / "conftest.py").write_text(CONFTEST)
    (out_dir / "pytest.ini").write_text(PYTEST_INI)
    return out_dir / SUITE_FILE


def run(pytest_args, python: str = sys.executable, exclude: str | None = None) -> int:
    """Run the adapted suite; ``exclude``: a regular expression, the models it matches (re.search) are left out."""
    if exclude:
        re.compile(exclude)  # a bad pattern fails here, naming it, not inside the suite's collection
    tests_dir = fetch(python=python)
    out_dir = tests_dir.parent / "adapted"
    suite = write_adapted(tests_dir, out_dir)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               MKL_NUM_THREADS=os.environ.get("MKL_NUM_THREADS", "1"))
    env.pop("SSM_TIMM_SUITE_EXCLUDE", None)
    if exclude:
        env["SSM_TIMM_SUITE_EXCLUDE"] = exclude
    env.pop("GITHUB_ACTIONS", None)  # timm's suite trims its lists on GitHub runners
    cmd = [python, "-m", "pytest", str(suite), "-c", str(out_dir / "pytest.ini"), "--rootdir", str(out_dir),
           "-p", "no:cacheprovider", *pytest_args]
    return subprocess.run(cmd, env=env, cwd=out_dir).returncode


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fetch", help="download timm's sdist once and cache its tests/")
    run_parser = sub.add_parser("run", help="run timm's model tests against our models (extra args go to pytest)")
    run_parser.add_argument("--exclude", metavar="REGEX", help="leave out the models this regular expression matches")
    args, rest = parser.parse_known_args(argv)
    if args.command == "fetch":
        print(fetch())
        return 0
    try:
        return run(rest, exclude=args.exclude)
    except re.error as exc:
        parser.error(f"--exclude {args.exclude!r} is not a regular expression: {exc}")


if __name__ == "__main__":
    sys.exit(main())
