"""The fork server that runs the tests' training commands (tests/_forked.py) gives what subprocess.run gives."""
import os
import subprocess
import sys
import textwrap

import pytest

from _forked import ForkServer

PROGRAM = textwrap.dedent("""
    import os, sys
    print("argv", sys.argv[1:], "env", os.environ.get("FORKED_TEST"), "cwd", os.getcwd(), "path0", sys.path[0])
    print("to stderr", file=sys.stderr)
    import colorsys  # left imported in this child only
    if sys.argv[1] == "raise":
        raise KeyError("from the program")
    if sys.argv[1] == "message":
        sys.exit("a message")
    sys.exit(int(sys.argv[1]))
""")


@pytest.fixture(scope="module")
def server():
    return ForkServer(preload=("json",))  # a server of its own: no toolbox import for these checks


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "bin" / "program.py"
    path.parent.mkdir()
    path.write_text(PROGRAM)
    return path


@pytest.mark.parametrize("argument", ["0", "3", "raise", "message"])
def test_a_forked_run_is_the_subprocess_run(server, program, tmp_path, argument):
    args = [sys.executable, str(program), argument]
    env = dict(os.environ, FORKED_TEST="value")
    expected = subprocess.run(args, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    forked = server.run(args, env=env, cwd=tmp_path, timeout=60)
    assert forked.returncode == expected.returncode == {"0": 0, "3": 3, "raise": 1, "message": 1}[argument]
    assert forked.stdout == expected.stdout
    assert f"cwd {tmp_path} path0 {program.parent}" in forked.stdout
    if argument == "raise":  # the same traceback, ending in the program's exception
        assert forked.stderr.splitlines()[-1] == expected.stderr.splitlines()[-1] == "KeyError: 'from the program'"
    else:
        assert forked.stderr == expected.stderr


def test_children_do_not_share_what_they_import_or_set(server, program, tmp_path):
    server.run([sys.executable, str(program), "0"], timeout=60)
    check = tmp_path / "check.py"
    check.write_text("import os, sys; print('colorsys' in sys.modules, os.environ.get('FORKED_TEST'))")
    assert server.run([sys.executable, str(check)], env={"PATH": os.environ["PATH"]}, timeout=60).stdout == \
        "False None\n"


def test_a_module_runs_as_with_python_m(server, tmp_path):
    (tmp_path / "data.json").write_text('{"b": 1}')
    done = server.run([sys.executable, "-m", "json.tool", "data.json"], cwd=tmp_path, timeout=60)
    assert (done.returncode, done.stdout) == (0, '{\n    "b": 1\n}\n')


def test_a_run_past_its_timeout_is_killed_and_the_server_serves_on(server, program, tmp_path):
    sleeper = tmp_path / "sleep.py"
    sleeper.write_text("import time; time.sleep(60)")
    with pytest.raises(subprocess.TimeoutExpired):
        server.run([sys.executable, str(sleeper)], timeout=0.5)
    assert server.run([sys.executable, str(program), "3"], timeout=60).returncode == 3


@pytest.mark.parametrize("args", [["python", "x.py"], [sys.executable], [sys.executable, "-c", "print(1)"],
                                  [sys.executable, "-m"]])
def test_only_programs_and_modules_run(server, args):
    with pytest.raises(ValueError, match="args must be"):
        server.run(args)
