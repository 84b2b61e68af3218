"""Environments, one module per suite, behind one factory (`env.suite` picks the module's `SUITE`
through the one map in collectors/envs/suite.py).

  dmc      DeepMind Control (dm_control), continuous actions            collectors/envs/dmc.py
  gym      any registered Gymnasium env id                              collectors/envs/gym.py
  atari    Atari through ale-py (suite atari100k: the Atari 100k setting) collectors/envs/atari.py
  crafter  Crafter                                                      collectors/envs/crafter.py

Every env is a torchrl env with the same keys: `pixels` uint8 [C, H, W] and/or `observation`
float32 [D], `action` (one-hot for discrete action spaces, else in [-1, 1]), ("next", reward /
done / terminated / truncated), `is_init`, `step_count`. Suite modules import torchrl only when
building an env, so start-up checks (collectors/specs.py) stay torch-free.
"""
from __future__ import annotations

import functools


def make_env(env_cfg: dict, seed: int, extra_transform=None):
    """One env of `env_cfg` (a plain dict of EnvConfig's fields) as a torchrl env, ending with the
    non-finite data guard (collectors/envs/guard.py)."""
    from collectors.envs.guard import FiniteGuard
    from collectors.envs.suite import task_name

    worker = env_cfg.get("worker")
    name = task_name(env_cfg)
    where = f"env worker {worker} ({name})" if worker is not None else f"the evaluation env ({name})"
    env = _make_env(dict(env_cfg, where=where), seed, extra_transform)
    env.append_transform(FiniteGuard(["observation"], where, env_cfg.get("nonfinite", "error")))
    if env_cfg.get("heartbeat"):
        from collectors.envs.heartbeat import Heartbeat

        env.append_transform(Heartbeat(env_cfg["heartbeat"]))
    return env


def _make_env(env_cfg: dict, seed: int, extra_transform=None):
    from collectors.envs.suite import suite

    return suite(env_cfg.get("suite", "dmc")).make(env_cfg, seed, extra_transform)


def _plain(env_cfg) -> dict:
    from omegaconf import DictConfig, OmegaConf
    import dataclasses

    if isinstance(env_cfg, DictConfig):
        return OmegaConf.to_container(env_cfg, resolve=True)
    if dataclasses.is_dataclass(env_cfg):
        return dataclasses.asdict(env_cfg)
    return dict(env_cfg)


def env_factory(env_cfg, seed: int, extra_transform=None, obs: str | None = None,
                fast_visuals: bool | None = None, render_device: int | None = None, render_pixels: bool = False,
                worker: int | None = None, heartbeat: str | None = None, error_log: str | None = None):
    """A picklable zero-argument factory, as the collector's worker processes need.

    `obs` and `fast_visuals` override env_cfg (evaluation renders pixels for videos of vector-
    observation runs: obs="both"); `render_device`: the GPU a DMC env renders on; `render_pixels`: a
    symbolic gym env adds its rgb_array frames as `pixels` (videos; the agent does not read them);
    `worker`: the collector's env index, for error messages (None: the evaluation env); `heartbeat`:
    a file the env marks each step and reset in (collectors/envs/heartbeat.py); `error_log`: where a
    Gymnasium env's exception leaves its traceback (collectors/envs/guard.py EnvErrors).
    """
    cfg = _plain(env_cfg)
    cfg["render_device"] = render_device
    cfg["render_pixels"] = render_pixels
    cfg["worker"] = worker
    cfg["heartbeat"] = heartbeat
    cfg["error_log"] = error_log
    if obs is not None:
        cfg["obs"] = obs
    if fast_visuals is not None:
        cfg["fast_visuals"] = fast_visuals
    return functools.partial(make_env, cfg, seed, extra_transform)


def random_actions(env, steps: int) -> float:
    """Steps `env` with uniform random actions; returns the summed reward (for baselines/tests)."""
    total = 0.0
    td = env.reset()
    for _ in range(steps):
        td = env.rand_step(td)
        total += float(td["next", "reward"].sum())
        done = td["next", "done"].any()
        td = env.reset() if done else td["next"]
    return total
