"""The env group's schema (conf/env/): which suite, which task, and its settings, checked at
start-up against the suite's own registry (dm_control, Gymnasium, ale-py, Crafter) before torch loads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Optional

from collectors.envs.suite import SUITE_MODULES
from collectors.envs.suite import suite as env_suite
from dreamer.config.errors import _check


@dataclass
class EnvConfig:
    suite: str = "dmc"  # dmc | gym | atari | atari100k | crafter (collectors/envs/)
    domain: str = "walker"  # dmc: the domain
    task: str = "walk"  # dmc: the task; atari: the game (pong); crafter: reward | noreward
    id: Optional[str] = None  # gym: a registered Gymnasium env id (CartPole-v1)
    obs: str = "pixels"  # pixels | proprio (a vector observation) | both | symbolic (gym: an image of codes as numbers)
    image_size: int = 64  # pixels: frames are resized to image_size x image_size
    action_repeat: int = 2  # env frames per agent step (frames = steps x action_repeat)
    camera: Optional[int] = None  # dmc, null: DreamerV3's choice (2 for quadruped, else 0)
    # dmc: shadows, reflections, multisampling off and a small offscreen buffer: several times faster
    # CPU rendering, but different images, so not for comparisons with published runs.
    fast_visuals: bool = False
    gray: bool = False  # atari: luminance frames [1, H, W] (full Atari)
    sticky: bool = False  # atari: repeat the previous action with p = 0.25 (full Atari)
    actions: str = "minimal"  # atari: minimal (the game's own set) | all (18)
    noops: int = 0  # atari: up to this many no-op steps after a reset (official: 30)
    # dmc pixels: the GPUs env workers render on, round-robin (MUJOCO_EGL_DEVICE_ID): all | [0, 1, ...]
    render_devices: Any = "all"
    # a NaN or inf in an observation or reward: error (stop, naming it) | zero (replace with 0, count
    # in collect/nonfinite_values; for envs known to emit them). collectors/envs/guard.py
    nonfinite: str = "error"

    def __post_init__(self) -> None:
        _check(self.suite in SUITE_MODULES, "env.suite",
               f"allowed values are {', '.join(SUITE_MODULES)} (got {self.suite!r})")
        _check(self.obs in ("pixels", "proprio", "both", "symbolic"), "env.obs",
               f"allowed values are pixels, proprio, both, symbolic (got {self.obs!r})")
        observations = env_suite(self.suite).observations
        _check(self.obs != "symbolic" or "symbolic" in observations, "env.obs",
               f"symbolic (an image of object codes read as numbers) is for gym envs; {self.suite} has "
               + " or ".join(observations))
        _check(self.obs in observations, "env.obs", f"{self.suite} observes {' or '.join(observations)} only "
               f"(got {self.obs!r})")
        _check(self.image_size >= 16, "env.image_size", f"must be >= 16 (got {self.image_size})")
        _check(self.action_repeat >= 1, "env.action_repeat", f"must be >= 1 (got {self.action_repeat})")
        _check(self.actions in ("minimal", "all"), "env.actions", f"allowed values are minimal, all (got {self.actions!r})")
        _check(self.noops >= 0, "env.noops", f"must be >= 0 (got {self.noops})")
        _check(self.nonfinite in ("error", "zero"), "env.nonfinite",
               f"allowed values are error, zero (got {self.nonfinite!r})")

    @property
    def name(self) -> str:
        return task_name(self.suite, self.domain, self.task, self.id)


def task_name(suite_name: str, domain: str, task: str, env_id: Optional[str]) -> str:
    """The task's name in the official score files (dmc_walker_walk, atari100k_pong, crafter_reward)."""
    from collectors.envs.suite import task_name as named

    return named({"suite": suite_name, "domain": domain, "task": task, "id": env_id})


def check_task(env: EnvConfig) -> None:
    """The task exists and its spec loads (the suite's own registry; before torch)."""
    from collectors.specs import env_spec

    try:
        env_suite(env.suite).check(dataclasses.asdict(env))
        env_spec(env)
    except ValueError as err:  # the suite names the key: "env.obs: ..." / "env.id: ..."
        key, _, problem = str(err).partition(": ")
        _check(False, key if key.startswith("env.") else "env", problem if key.startswith("env.") else str(err))
