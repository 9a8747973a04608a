"""Run a Python script with ssm_plugins' models registered: ``python -m ssm_plugins SCRIPT [ARGS ...]``.

timm has no plugin discovery, and of its scripts only ``train.py`` imports extra modules (``--device-modules``).
``benchmark.py``, ``validate.py``, ``inference.py``, ``onnx_export.py`` and the rest build ``--model`` from timm's
registry alone, so they run through this instead of ``python``:

    python -m ssm_plugins benchmark.py --model vim2_t --bench both --device cpu
    python -m ssm_plugins validate.py /data/imagenet/val --model vim2_t --checkpoint model_best.pth.tar
    python -m ssm_plugins onnx_export.py vim2_t.onnx --model vim2_t --dynamo

The script runs as ``__main__`` with its own folder first on ``sys.path`` and ``sys.argv`` = [SCRIPT, ARGS ...], as
``python SCRIPT ARGS ...`` would run it.
"""
import os
import runpy
import sys


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__.strip())
        raise SystemExit(0 if argv else 2)
    script = argv[0]
    if not os.path.isfile(script):
        raise SystemExit(f"python -m ssm_plugins: SCRIPT {script!r} is not a file (a Python script such as "
                         f"timm's benchmark.py is expected)")
    import ssm_plugins  # noqa: F401  (registers the models with timm when the script imports it)

    sys.argv = [script, *argv[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
