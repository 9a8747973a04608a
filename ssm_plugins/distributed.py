"""Multi-process runs on CPUs (gloo process groups): what the toolboxes' launchers leave to the program.

Used by the OpenMMLab runner (``ssm_plugins.openmmlab.CPUDistributedRunner``) and the SpeechBrain recipes
(``ssm_plugins.speechbrain.ddp_init_group``); imports nothing beyond torch.
"""
from __future__ import annotations

import atexit
import datetime

import torch.distributed as dist

# how long a process at exit waits for the others before it ends without them (they failed)
EXIT_BARRIER_TIMEOUT = datetime.timedelta(seconds=30)

_registered = False


def end_process_group_at_exit() -> None:
    """Ends this process's default process group at interpreter exit, after every process has got there.

    Why: a gloo worker thread can still hold the last collective's tensors when the main thread finishes; releasing
    them takes the GIL, and a thread that takes it while the interpreter finalises aborts the process ("terminate
    called without an active exception"): a finished run that torchrun reports as failed (about one run in four of
    a two-process gloo program whose last collective is just before its end). The barrier waits with the GIL
    released, so that thread finishes first; where another process never gets there (it failed, and torchrun stops
    the rest anyway), it gives up after :data:`EXIT_BARRIER_TIMEOUT`. Registered once however often it is called;
    nothing for a group of another backend (NCCL's collectives are not run by these threads) or without a group."""
    global _registered
    if not _registered and dist.is_available() and dist.is_initialized() and dist.get_backend() == "gloo":
        atexit.register(_end_process_group)
        _registered = True


def _end_process_group() -> None:
    if not dist.is_initialized():  # the program ended it itself
        return
    try:
        dist.monitored_barrier(timeout=EXIT_BARRIER_TIMEOUT)
    except RuntimeError:
        pass
    dist.destroy_process_group()
