"""timm's own model test suite (tests/test_models.py of the pinned timm's sdist) against every model we register.

``scripts/timm_test_suite.py`` fetches the sdist once (set-up, cached outside the repo) and adapts only the model
selection. The default tests check that adaptation (no test body changed, every exclusion has a reason and hits
one of our models); the slow test runs the whole suite in a subprocess. Without the cached sdist and without
network access the tests skip, saying how to fetch it.
"""
import ast
import fnmatch
import os
import re
import subprocess
import sys
import time
import typing
from pathlib import Path
from xml.etree import ElementTree

import pytest
import timm

from _scripts import load_script

ROOT = Path(__file__).resolve().parents[2]
import ssm_plugins  # noqa: E402,F401  (registers the models)

OUR_MODELS = {n for n in timm.list_models() if timm.models.model_entrypoint(n).__module__.startswith("ssm_plugins.")}
suite = load_script(ROOT / "scripts" / "timm_test_suite.py", "timm_test_suite")


@pytest.fixture(scope="module")
def timm_tests():
    try:
        return suite.fetch()
    except (subprocess.CalledProcessError, OSError) as exc:
        pytest.skip(f"timm's sdist is not cached and could not be fetched ({exc}); "
                    f"run `python scripts/timm_test_suite.py fetch` once with network access")


def _statements(source):
    """Every top-level statement (and every statement inside a top-level if) as its source text."""
    tree = ast.parse(source)
    out = []
    for node in tree.body:
        if isinstance(node, ast.If):
            out.extend(ast.get_source_segment(source, n) for n in node.body + node.orelse)
            out.append(ast.unparse(node.test))
        else:
            out.append(ast.get_source_segment(source, node))
    return out


def test_only_the_model_selection_changes(timm_tests):
    original = (timm_tests / suite.SUITE_FILE).read_text()
    adapted = suite.adapt(original)
    before, after = _statements(original), _statements(adapted)
    added = [s for s in after if s not in before]
    assert [s for s in before if s not in after] == []  # nothing of timm's removed or edited
    # what is added: the selection block (imports, two list functions) and one line per FILTERS entry
    names = {t for t, *_ in suite.FILTERS}
    for statement in added:
        first = statement.lstrip().split("\n")[0]
        assert (first.startswith(("import ssm_plugins", "_SSM_MODELS =", "def _ssm_only(", "def list_models(",
                                  "def list_pretrained("))
                or first.split(" = ")[0].strip() in names), statement
    tests_before = {n.name: ast.dump(n) for n in ast.walk(ast.parse(original)) if isinstance(n, ast.FunctionDef)}
    tests_after = {n.name: ast.dump(n) for n in ast.walk(ast.parse(adapted)) if isinstance(n, ast.FunctionDef)
                   and n.name in tests_before}
    assert tests_after == tests_before  # every test body and helper unchanged


def test_every_filter_entry_has_a_reason_and_hits_our_models():
    import fnmatch

    modules = {timm.models.model_entrypoint(n).__module__.rsplit(".", 1)[-1] for n in OUR_MODELS}
    for target, op, entries, reason in suite.FILTERS:
        assert op in "+-" and len(reason) > 20, (target, reason)
        for entry in entries:
            if target == "FEAT_INTER_FILTERS":
                assert entry in modules, entry
            else:
                assert fnmatch.filter(sorted(OUR_MODELS), entry), f"{target} entry {entry!r} matches none of our models"


def _models_run(report):
    """Our models named in a junit report's test ids ("test_model_forward[vim2_t]"; model names have no "-")."""
    names = set()
    for case in ElementTree.parse(report).iter("testcase"):
        params = re.search(r"\[(.*)\]", case.get("name", ""))
        if params:
            names |= {token.split(".")[0] for token in params.group(1).split("-")} & OUR_MODELS
    return names


# make test-all: one model per model class, the cheapest in timm's suite of each (timm's tests check a class's
# contract: default_cfg, features, intermediates, FX; the sizes are the class's defaults). Seconds per model, one
# thread (2026-11-29): viqs_t 59 (vim2_t 235), sviqs_scifar 131, vit_cifar 15, swin_cifar 17, mega_cifar 17,
# essm_2d_tiny 11, essm_scifar 38, myopix 30, myo_zcifar 28, myonet_tiny 22.
CLASS_MODELS = ("viqs_t", "sviqs_scifar", "vit_cifar_patch4_32_ssm2d", "swin_cifar_patch2_window4_32_ssm2d",
                "mega_cifar_patch4_32_ssm2d", "essm_2d_tiny", "essm_scifar", "myopix_zcifar", "myo_zcifar",
                "myonet_tiny", "s5_zcifar")
# make test: one model of each paper's family, the cheapest of its image backbones
FAMILY_MODELS = ("viqs_t", "vit_cifar_patch4_32_ssm2d", "essm_2d_tiny", "myonet_tiny")
SELECTIONS = {"one model per family": FAMILY_MODELS, "one model per class": CLASS_MODELS}


def _model_class(name):
    return typing.get_type_hints(timm.models.model_entrypoint(name))["return"]


def test_the_suite_selection_holds_every_model_class():
    excluded = {name for target, op, entries, _ in suite.FILTERS if target == "EXCLUDE_FILTERS"
                for name in OUR_MODELS if any(fnmatch.fnmatch(name, entry) for entry in entries)}
    assert not set(CLASS_MODELS) & excluded
    classes = {_model_class(n) for n in OUR_MODELS - excluded}
    assert {_model_class(n) for n in CLASS_MODELS} == classes
    assert set(FAMILY_MODELS) <= set(CLASS_MODELS)
    families = {timm.models.model_entrypoint(n).__module__ for n in FAMILY_MODELS}
    assert len(families) == len(FAMILY_MODELS)  # one model of each family's model file


@pytest.mark.slow
@pytest.mark.parametrize("models", [
    # make test-all: one model per class, and all 74 models (31 minutes on 2 cores, 2026-11-27)
    "one model per family", pytest.param("one model per class", marks=pytest.mark.exhaustive),
    pytest.param("every model", marks=pytest.mark.exhaustive)])
def test_timm_model_suite_passes(timm_tests, tmp_path, models):
    """The adapted suite: every applicable test of timm's test_models.py for our models."""
    report = tmp_path / "junit.xml"
    start = time.perf_counter()
    selection = SELECTIONS.get(models, ())
    others = "^(?!(" + "|".join(selection) + ")$)"  # every model but the selection
    exclude = [] if models == "every model" else ["--exclude", others]
    # -n auto: one pytest-xdist worker per core (timm's CI runs this file with xdist too); --durations: where the
    # time goes, printed in the CI log
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "timm_test_suite.py"), "run", *exclude, "-q",
                             "-n", "auto", "--durations=15", "-p", "no:warnings", "--tb=line",
                             f"--junitxml={report}"],
                            capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    minutes = (time.perf_counter() - start) / 60
    summary = result.stdout[-6000:]
    assert result.returncode == 0, f"timm's suite failed after {minutes:.1f} min:\n{summary}"
    ran = _models_run(report)
    if models == "every model":
        assert {"vim2_t", "viqs_t", "essm_2d_tiny", "myonet_tiny"} <= ran and len(ran) > 3 * len(CLASS_MODELS), \
            sorted(ran)
    else:
        assert ran == set(selection), sorted(ran ^ set(selection))
    print(f"timm's suite passed in {minutes:.1f} min for {len(ran)} models:\n{summary}")
