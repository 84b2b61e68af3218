"""The Gymnasium layer every non-DMC suite shares, and its conversion to a torchrl env.

Each suite module builds a Gymnasium env whose observation space is a Dict of
  pixels       uint8 [H, W, C]  (resized to env.image_size; C = 1 for gray Atari)
  observation  float32 [D]      (a vector observation)
  <stat>       uint8 [K]        (optional per-step statistics, e.g. Crafter's achievements)
and whose action space is Discrete (one-hot in torchrl) or a Box in [-1, 1], with a `max_steps`
attribute (the episode limit in agent steps). `to_torchrl` wraps it with torchrl's GymWrapper
(terminated / truncated from Gymnasium) and the keys the app expects (see collectors/envs/dmc.py).
"""
from __future__ import annotations

import functools

import gymnasium
import numpy as np
from PIL import Image


def resize(image: np.ndarray, size: int) -> np.ndarray:
    """[H, W, C] uint8 -> [size, size, C], bilinear (PIL, as the official DreamerV3 resizes)."""
    if image.shape[0] == size and image.shape[1] == size:
        return image
    channels = image.shape[2]
    pil = Image.fromarray(image[..., 0] if channels == 1 else image)
    out = np.array(pil.resize((size, size), Image.BILINEAR))  # a writable copy: torch wraps it
    return out[..., None] if channels == 1 else out


class ActionRepeat(gymnasium.Wrapper):
    """Repeats each action, summing rewards, until the episode ends."""

    def __init__(self, env: gymnasium.Env, repeat: int):
        super().__init__(env)
        self.repeat = repeat

    def step(self, action):
        total = 0.0
        for _ in range(self.repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


def check_action_space(space: gymnasium.Space, name: str) -> None:
    if isinstance(space, gymnasium.spaces.Discrete):
        return
    if isinstance(space, gymnasium.spaces.Box) and len(space.shape) == 1:
        if not (np.isfinite(space.low).all() and np.isfinite(space.high).all()):
            raise ValueError(f"{name}: unbounded Box actions are not supported (DreamerV3's actor acts in [-1, 1])")
        return
    raise ValueError(f"{name}: action space {space} is not supported; Discrete or a 1-D bounded Box")


def to_torchrl(env: gymnasium.Env, seed: int | None, extra_transform=None):
    """torchrl env: one-hot or [-1, 1] actions, CHW pixels, is_init and step_count."""
    from torchrl.envs import Compose, InitTracker, PermuteTransform, StepCounter, TransformedEnv
    from torchrl.envs.libs.gym import GymWrapper

    env.reset(seed=seed)  # seeds the env's RNG; later resets continue it
    base = GymWrapper(env, device="cpu")
    transforms = []
    if "pixels" in env.observation_space.spaces:
        transforms.append(PermuteTransform((-1, -3, -2), in_keys=["pixels"], out_keys=["pixels"]))
    transforms += [InitTracker(), StepCounter()]
    if extra_transform is not None:
        transforms.append(extra_transform())
    return TransformedEnv(base, Compose(*transforms))


def gymnasium_suite(make_gymnasium, observations: tuple[str, ...], **hooks):
    """A Suite (collectors/envs/suite.py) for a suite whose `make_gymnasium(cfg, seed)` returns one of
    our Gymnasium envs: its spec is read off that env, and the torchrl env wraps it in the app's fault
    guard (collectors/envs/guard.py EnvErrors) and `to_torchrl`. `hooks`: check, task_name, renders."""
    from collectors.envs.suite import Suite

    return Suite(observations=observations, make=functools.partial(_make_torchrl, make_gymnasium),
                 spec=functools.partial(_spec, make_gymnasium), **hooks)


def _make_torchrl(make_gymnasium, cfg: dict, seed: int, extra_transform=None):
    from collectors.envs.guard import EnvErrors

    env = EnvErrors(make_gymnasium(cfg, seed), cfg.get("where", cfg["suite"]), cfg.get("error_log"))
    return to_torchrl(env, seed, extra_transform)


def _spec(make_gymnasium, cfg: dict):
    from collectors.specs import gymnasium_spec

    env = make_gymnasium(cfg, seed=0)
    try:
        return gymnasium_spec(env)
    finally:
        env.close()
