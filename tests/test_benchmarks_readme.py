"""`--write-readme`: a benchmark script rewrites its own section of benchmarks/README.md and nothing else."""
import datetime
import re
from pathlib import Path

import pytest

from benchmarks import _common
from benchmarks._common import readme_section, replace_section

ROOT = Path(__file__).resolve().parents[1]

README = """# Benchmarks

intro text, kept as is

<!-- BEGIN benchmarks.alpha -->
`python -m benchmarks.alpha` · old machine

| a | b |
|---|---|
| 1 | 2 |
<!-- END benchmarks.alpha -->

commentary between the sections

<!-- BEGIN benchmarks.beta -->
old beta table
<!-- END benchmarks.beta -->
tail
"""


def _before(text: str, name: str) -> str:
    begin, _ = _common.markers(name)
    return text[:text.index(begin) + len(begin)]


def _after(text: str, name: str) -> str:
    _, end = _common.markers(name)
    return text[text.index(end):]


def _inside(text: str, name: str) -> str:
    begin, end = _common.markers(name)
    return text[text.index(begin) + len(begin):text.index(end)]


def test_replace_section_replaces_only_that_section():
    new = replace_section(README, "benchmarks.alpha", "| a | b |\n|---|---|\n| 3 | 4 |\n")
    assert "| 3 | 4 |" in new and "| 1 | 2 |" not in new and "old machine" not in new
    # everything before and after the section (the other section included) is byte-identical
    assert _before(new, "benchmarks.alpha") == _before(README, "benchmarks.alpha")
    assert _after(new, "benchmarks.alpha") == _after(README, "benchmarks.alpha")
    # replacing again with the same body is a fixed point
    assert replace_section(new, "benchmarks.alpha", "| a | b |\n|---|---|\n| 3 | 4 |") == new


@pytest.mark.parametrize("text, problem", [
    (README.replace("<!-- BEGIN benchmarks.beta -->\n", ""), "BEGIN benchmarks.beta -->' not found"),
    (README.replace("<!-- END benchmarks.beta -->\n", ""), "END benchmarks.beta -->' not found"),
    (README + "<!-- BEGIN benchmarks.beta -->\n", "found 2 times"),
])
def test_a_missing_or_repeated_marker_names_the_section_and_the_marker(text, problem):
    with pytest.raises(ValueError, match=re.escape(problem)) as err:
        replace_section(text, "benchmarks.beta", "x", where="benchmarks/README.md")
    assert "section 'benchmarks.beta'" in str(err.value) and "benchmarks/README.md" in str(err.value)


def test_end_before_begin_is_an_error():
    text = "<!-- END benchmarks.gamma -->\n<!-- BEGIN benchmarks.gamma -->\n"
    with pytest.raises(ValueError, match="comes before"):
        replace_section(text, "benchmarks.gamma", "x")


def test_readme_section_writes_what_the_block_prints_with_command_and_machine(tmp_path, capsys):
    path = tmp_path / "README.md"
    path.write_text(README)
    with readme_section("benchmarks.beta", True, ["--quick", "--filter", "^vi m", "--write-readme"], readme=path):
        print("| model | s |\n|---|---|\n| x | 0.5 |")
    assert "| x | 0.5 |" in capsys.readouterr().out  # still printed to the terminal
    text = path.read_text()
    body = text.split("<!-- BEGIN benchmarks.beta -->\n")[1].split("<!-- END benchmarks.beta -->")[0]
    first, rest = body.split("\n", 1)
    assert first.startswith("`python -m benchmarks.beta --quick --filter '^vi m'` · ")
    assert datetime.date.today().isoformat() in first and "torch " in first and "threads" in first
    assert rest == "\n| model | s |\n|---|---|\n| x | 0.5 |\n"
    assert "old beta table" not in text
    assert _inside(text, "benchmarks.alpha") == _inside(README, "benchmarks.alpha")
    assert _before(text, "benchmarks.beta") == _before(README, "benchmarks.beta")
    assert _after(text, "benchmarks.beta") == _after(README, "benchmarks.beta")


def test_readme_section_disabled_leaves_the_file_alone(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(README)
    with readme_section("benchmarks.beta", False, [], readme=path):
        print("new")
    assert path.read_text() == README


def test_a_missing_marker_fails_before_the_benchmark_runs(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(README)
    ran = []
    with pytest.raises(ValueError, match="benchmarks.delta"):
        with readme_section("benchmarks.delta", True, [], readme=path):
            ran.append(True)
    assert not ran and path.read_text() == README


def test_a_failing_benchmark_writes_nothing(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(README)
    with pytest.raises(RuntimeError):
        with readme_section("benchmarks.alpha", True, [], readme=path):
            print("partial output")
            raise RuntimeError("benchmark failed")
    assert path.read_text() == README


def test_a_missing_readme_is_named(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        with readme_section("benchmarks.alpha", True, [], readme=tmp_path / "nope.md"):
            pass


def test_every_script_with_write_readme_has_its_section_in_benchmarks_readme():
    names = set()
    for script in sorted((ROOT / "benchmarks").glob("*.py")):
        found = re.findall(r"readme_section\(\s*['\"](benchmarks\.\w+)['\"]", script.read_text())
        for name in found:
            assert name == f"benchmarks.{script.stem}", (script.name, name)  # the section is the -m name
        names.update(found)
    assert {"benchmarks.ops", "benchmarks.models_vim2", "benchmarks.throughput", "benchmarks.params_mm"} <= names
    text = (ROOT / "benchmarks" / "README.md").read_text()
    for name in sorted(names):
        replace_section(text, name, "", where="benchmarks/README.md")  # exactly one well-ordered marker pair
