"""Run a Python program as ``subprocess.run([sys.executable, program, *args], ...)`` would, in a process forked from a
server that has already imported torch, timm, the OpenMMLab toolboxes and SpeechBrain.

A training command that a test starts spends 9-15 s of its 20-60 s on those imports (tests/README.md, 'Where the
time goes'). Here each program still runs in a process of its own, with its own ``sys.argv``, environment, working
directory, exit status and captured stdout / stderr; only the imports are shared. The server (one per test worker,
started at the first call) imports them and computes nothing, so no thread pool is ever forked. Use it for programs
that are about our configs and recipes; a test about a launcher itself (``mim``, ``torchrun``) starts that with
:func:`subprocess.run`.

(multiprocessing's own fork server cannot serve here: it re-imports the parent's ``__main__`` in every child, which
under pytest is pytest's or xdist's.)
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Optional, Sequence

# What the server imports once. A module that is not installed is left out (an optional toolbox).
PRELOAD = ("torch", "torchvision", "timm", "ssm_plugins", "mmengine.runner", "mmcv.ops", "mmdet.apis", "mmseg.apis",
           "mmpretrain.apis", "speechbrain", "hyperpyyaml")
_channel_fd: Optional[int] = None  # the server's answers; closed in each child


def _child(request: dict):
    """In the forked process: the streams, environment, directory and ``sys.path`` of ``python PROGRAM`` started
    afresh, then the program as ``__main__``; never returns."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.close(_channel_fd)
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(target, fd)
            os.close(target)
        env, program = request["env"], request["program"]
        os.environ.clear()
        os.environ.update(env)
        os.chdir(request["cwd"])
        # python puts the program's folder first (the working directory for -m), then PYTHONPATH
        first = os.getcwd() if program[0] == "-m" else os.path.dirname(os.path.abspath(program[0]))
        extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
        sys.path[:1] = [first, *extra]
        if env.get("OMP_NUM_THREADS"):
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        import runpy

        try:
            if program[0] == "-m":
                sys.argv = [program[1], *program[2:]]
                runpy.run_module(program[1], run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(program)
                runpy.run_path(program[0], run_name="__main__")
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
        except BaseException:
            import traceback

            traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)  # no atexit handlers of the server's, nor a second flush


def _serve(modules):
    """The server: import ``modules``, then for each request line on stdin fork a child, answer its pid, wait for it
    and answer its exit status."""
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    global _channel_fd
    _channel_fd = os.dup(1)
    channel = os.fdopen(_channel_fd, "w", buffering=1)
    print(json.dumps({"ready": True}), file=channel)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), file=channel)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"returncode": os.waitstatus_to_exitcode(status)}), file=channel)


class ForkServer:
    """A server that imports ``preload`` once and forks a child per :meth:`run`; started at the first run, and
    again if it died. It ends with the process that started it (its stdin closes)."""

    def __init__(self, preload=PRELOAD):
        self.preload = tuple(preload)
        self._server: Optional[subprocess.Popen] = None

    def _answer(self, timeout: Optional[float]) -> Optional[dict]:
        ready, _, _ = select.select([self._server.stdout], [], [], timeout)
        if not ready:
            return None
        line = self._server.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server ({__file__}) died with exit status {self._server.wait()}")
        return json.loads(line)

    def _started(self) -> subprocess.Popen:
        if self._server is None or self._server.poll() is not None:
            self._server = subprocess.Popen([sys.executable, __file__, *self.preload], stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True, bufsize=1)
            if self._answer(600) != {"ready": True}:
                raise RuntimeError(f"the fork server ({__file__}) did not start")
        return self._server

    def run(self, args: Sequence, env: Optional[Dict[str, str]] = None, cwd: Optional[os.PathLike] = None,
            timeout: Optional[float] = None) -> subprocess.CompletedProcess:
        """``subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)`` for
        ``args = [sys.executable, program.py | -m module, *arguments]``, in a process forked from the server.
        A thread count that ``env`` does not set (``OMP_NUM_THREADS``) is the server's, i.e. its starter's."""
        args = [str(a) for a in args]
        if len(args) < 2 or args[0] != sys.executable or args[1].startswith("-") and (args[1] != "-m" or len(args) < 3):
            raise ValueError(f"args must be [sys.executable, program | -m module, ...], got {args[:3]}")
        server = self._started()
        with tempfile.TemporaryDirectory(prefix="forked-") as tmp:
            out, err = Path(tmp, "stdout"), Path(tmp, "stderr")
            request = {"program": args[1:], "env": dict(os.environ if env is None else env),
                       "cwd": str(cwd if cwd is not None else os.getcwd()), "stdout": str(out), "stderr": str(err)}
            server.stdin.write(json.dumps(request) + "\n")
            server.stdin.flush()
            pid = self._answer(60)["pid"]
            done = self._answer(timeout)
            if done is None:
                os.kill(pid, signal.SIGKILL)
                self._answer(60)
                raise subprocess.TimeoutExpired(args, timeout, output=out.read_text(errors="replace"),
                                                stderr=err.read_text(errors="replace"))
            return subprocess.CompletedProcess(args, done["returncode"], out.read_text(errors="replace"),
                                               err.read_text(errors="replace"))


_default = ForkServer()


def run(args: Sequence, env: Optional[Dict[str, str]] = None, cwd: Optional[os.PathLike] = None,
        timeout: Optional[float] = None) -> subprocess.CompletedProcess:
    """:meth:`ForkServer.run` on this test worker's server of the :data:`PRELOAD` imports."""
    return _default.run(args, env=env, cwd=cwd, timeout=timeout)


if __name__ == "__main__":
    _serve(sys.argv[1:])
