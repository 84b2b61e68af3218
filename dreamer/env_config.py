"""The env group's schema (conf/env/): which suite, which task, and its settings, checked at
start-up against the suite's own registry (dm_control, Gymnasium, ale-py, Crafter) before torch loads.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from dreamer.config_errors import _check

SUITES = ("dmc", "gym", "atari", "atari100k", "crafter")


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
        _check(self.suite in SUITES, "env.suite", f"allowed values are {', '.join(SUITES)} (got {self.suite!r})")
        _check(self.obs in ("pixels", "proprio", "both", "symbolic"), "env.obs",
               f"allowed values are pixels, proprio, both, symbolic (got {self.obs!r})")
        _check(self.obs != "symbolic" or self.suite == "gym", "env.obs",
               f"symbolic (an image of object codes read as numbers) is for gym envs; {self.suite} has "
               "pixels" + (" or proprio" if self.suite == "dmc" else ""))
        _check(self.image_size >= 16, "env.image_size", f"must be >= 16 (got {self.image_size})")
        _check(self.action_repeat >= 1, "env.action_repeat", f"must be >= 1 (got {self.action_repeat})")
        _check(self.actions in ("minimal", "all"), "env.actions", f"allowed values are minimal, all (got {self.actions!r})")
        _check(self.noops >= 0, "env.noops", f"must be >= 0 (got {self.noops})")
        _check(self.nonfinite in ("error", "zero"), "env.nonfinite",
               f"allowed values are error, zero (got {self.nonfinite!r})")
        if self.suite in ("atari", "atari100k", "crafter"):
            _check(self.obs == "pixels", "env.obs", f"{self.suite} observes pixels only (got {self.obs!r})")
        if self.suite == "gym":
            _check(bool(self.id), "env.id", "the gym suite needs a Gymnasium env id, e.g. env.id=CartPole-v1")

    @property
    def name(self) -> str:
        return task_name(self.suite, self.domain, self.task, self.id)


def task_name(suite: str, domain: str, task: str, env_id: Optional[str]) -> str:
    """The task's name in the official score files (dmc_walker_walk, atari100k_pong, crafter_reward)."""
    if suite == "dmc":
        return f"dmc_{domain}_{task}"
    if suite == "gym":
        return f"gym_{env_id}"
    return f"{suite}_{task}"


def check_task(env: EnvConfig) -> None:
    """The task exists (loads the suite's registry; before torch)."""
    if env.suite == "dmc":
        import collectors  # noqa: F401  (sets MUJOCO_GL before dm_control loads)
        from dm_control import suite

        domains = sorted({d for d, _ in suite.ALL_TASKS})
        _check(env.domain in domains, "env.domain",
               f"unknown DMC domain {env.domain!r}; allowed: {', '.join(domains)}")
        tasks = sorted(t for d, t in suite.ALL_TASKS if d == env.domain)
        _check(env.task in tasks, "env.task",
               f"unknown task {env.task!r} for domain {env.domain!r}; allowed: {', '.join(tasks)}")
    elif env.suite == "gym":
        import importlib

        import gymnasium

        from collectors.envs.gym import register_package_of

        module, _, env_id = env.id.rpartition(":")  # "my_package:MyEnv-v0" registers on import
        if module:
            try:
                importlib.import_module(module)
            except ImportError as err:
                _check(False, "env.id", f"cannot import {module!r} to register {env_id!r}: {err}")
        try:
            register_package_of(env_id)
        except ImportError as err:
            _check(False, "env.id", f"{env_id!r} is registered by a package that is not installed: {err}")
        if env_id not in gymnasium.registry:
            import difflib

            close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=5, cutoff=0.5)
            _check(False, "env.id", f"{env.id!r} is not a registered Gymnasium env id"
                   + (f"; closest registered ids: {', '.join(close)}" if close else "")
                   + " (import your env's package first, or register it)")
    elif env.suite in ("atari", "atari100k"):
        from collectors.envs.atari import games

        _check(env.task in games(), "env.task", f"unknown Atari game {env.task!r}; ale-py ships: {', '.join(games())}")
    elif env.suite == "crafter":
        _check(env.task in ("reward", "noreward"), "env.task", f"allowed values are reward, noreward (got {env.task!r})")
    from collectors.specs import env_spec

    try:
        env_spec(env)
    except ValueError as err:  # the suite names the key: "env.obs: ..." / "env.id: ..."
        key, _, problem = str(err).partition(": ")
        _check(False, key if key.startswith("env.") else "env", problem if key.startswith("env.") else str(err))
