"""Environments and collection; knows nothing about learning (policies arrive as factories)."""
import os

# MuJoCo picks its GL backend at import: EGL renders offscreen with or without a GPU
# (Mesa's llvmpipe on CPU-only machines). Set before any dm_control import, workers inherit it.
os.environ.setdefault("MUJOCO_GL", "egl")
# Gymnasium renders classic-control envs with pygame: no window, no SDL session, no banner.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
# torchrl logs every storage allocation and server choice at INFO; keep our console for progress.
os.environ.setdefault("RL_LOGGING_LEVEL", "WARNING")

import logging

# PyOpenGL announces at INFO that its optional accelerator module is missing, on every start.
logging.getLogger("OpenGL").setLevel(logging.WARNING)
logging.getLogger("absl").setLevel(logging.WARNING)  # dm_control's GL backend banner

from collectors.absent_modules import mark_absent_modules

mark_absent_modules()
