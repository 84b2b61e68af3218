"""The process set-up every entry point runs first: train.py, `python -m dreamer.evaluate`, the
benchmarks (benchmarks/__init__.py) and the tests (tests/conftest.py).

It must run before torch is imported (MKL's shim has to be in the global symbol scope first,
patches/mkl_amd.py; inductor reads its cache dir once) and before any simulator renders. Importing
a package of the app changes nothing in the process; this call does, once.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

APP_CACHE = Path.home() / ".cache" / "dreamer-app"  # the app's on-disk caches (compiled code, MKL's shim)
ENV_DEFAULTS = {
    # where inductor keeps compiled regions between runs (patches/regional.py); importing
    # torch._dynamo sets torch's default under /tmp when this is unset
    "TORCHINDUCTOR_CACHE_DIR": str(APP_CACHE / "inductor"),
    # MuJoCo picks its GL backend at import: EGL renders offscreen with or without a GPU (Mesa's
    # llvmpipe on CPU-only machines); spawned workers inherit it
    "MUJOCO_GL": "egl",
    # Gymnasium renders classic-control envs with pygame: no window, no SDL session, no banner
    "SDL_VIDEODRIVER": "dummy",
    "PYGAME_HIDE_SUPPORT_PROMPT": "1",
    # torchrl logs every storage allocation and server choice at INFO: the console is for progress
    "RL_LOGGING_LEVEL": "WARNING",
}
QUIET_LOGGERS = ("OpenGL", "absl")  # PyOpenGL's missing-accelerator note, dm_control's GL banner

_status: list[str | None] = []  # set once: MKL's status line (None: nothing to do on this CPU)


def setup() -> str | None:
    """Environment defaults (a value the user set wins), quiet library loggers, tensordict's
    per-call pandas lookup answered (patches/absent_modules.py) and MKL's AVX-512 kernels on AMD
    CPUs (patches/mkl_amd.py). Returns MKL's status line; a second call only returns it."""
    if _status:
        return _status[0]
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)
    from patches import mkl_amd
    from patches.absent_modules import mark_absent_modules

    mark_absent_modules()
    _status.append(mkl_amd.apply(APP_CACHE))
    return _status[0]
