"""Any registered Gymnasium env (suite `gym`): `env=gym env.id=CartPole-v1`.

Observations: a 1-D Box becomes `observation` (float32); an image Box ([H, W, C] or [H, W] uint8)
becomes `pixels`, resized to env.image_size. env.obs picks what the agent sees: `proprio` the
vector, `pixels` the image (the env's own, or its `render_mode="rgb_array"` frames for a vector
env), `both`. Actions: Discrete (one-hot) or a bounded 1-D Box, rescaled to [-1, 1]. Episodes end
as Gymnasium says: `terminated` (continue target 0) or `truncated` (its TimeLimit).
"""
from __future__ import annotations

import math
import warnings

import gymnasium
import numpy as np

from collectors.envs.common import ActionRepeat, check_action_space, resize

NO_TIME_LIMIT_STEPS = 100_000  # evaluation's cap for an env registered without a time limit


def _is_image(space: gymnasium.Space) -> bool:
    return (isinstance(space, gymnasium.spaces.Box) and space.dtype == np.uint8
            and (len(space.shape) == 2 or (len(space.shape) == 3 and space.shape[2] in (1, 3, 4))))


def _is_vector(space: gymnasium.Space) -> bool:
    return isinstance(space, gymnasium.spaces.Box) and len(space.shape) == 1


class DreamerObservation(gymnasium.ObservationWrapper):
    """The env's observation -> {"pixels"?, "observation"?} as env.obs asks (module docstring)."""

    def __init__(self, env: gymnasium.Env, obs: str, size: int, name: str):
        super().__init__(env)
        space = env.observation_space
        self.size = size
        if _is_vector(space):
            self.vector, self.rendered = obs in ("proprio", "both"), obs in ("pixels", "both")
            self.image = False
        elif _is_image(space):
            if obs != "pixels":
                raise ValueError(f"env.obs: {name} observes images; use env.obs=pixels (got {obs!r})")
            self.vector, self.rendered, self.image = False, False, True
        else:
            raise ValueError(f"env.id: {name}'s observation space {space} is not supported "
                             "(a 1-D Box vector or an image Box)")
        if self.rendered and env.render_mode != "rgb_array":
            raise ValueError(f"env.obs: {name} has no rgb_array rendering for pixels; use env.obs=proprio")
        spaces = {}
        if self.image or self.rendered:
            channels = 1 if self.image and (len(space.shape) == 2 or space.shape[2] == 1) else 3
            spaces["pixels"] = gymnasium.spaces.Box(0, 255, (size, size, channels), np.uint8)
        if self.vector:
            spaces["observation"] = gymnasium.spaces.Box(-np.inf, np.inf, space.shape, np.float32)
        self.observation_space = gymnasium.spaces.Dict(spaces)

    def observation(self, observation):
        out = {}
        if self.image:
            image = observation if observation.ndim == 3 else observation[..., None]
            out["pixels"] = resize(np.ascontiguousarray(image[..., :3]), self.size)
        if self.rendered:
            out["pixels"] = resize(np.ascontiguousarray(self.env.render()[..., :3]), self.size)
        if self.vector:
            out["observation"] = np.asarray(observation, np.float32)
        return out


def make_gymnasium(cfg: dict, seed: int | None = None) -> gymnasium.Env:
    """The Gymnasium env of `cfg` (EnvConfig fields) with our observation dict and action range."""
    name = cfg["id"]
    render = cfg["obs"] in ("pixels", "both")
    try:
        env = gymnasium.make(name, render_mode="rgb_array" if render else None)
    except Exception as err:
        if render and "render_mode" in str(err):
            env = gymnasium.make(name)
        else:
            raise
    if render and _is_vector(env.observation_space) and env.render_mode != "rgb_array":
        raise ValueError(f"env.obs: {name} cannot render rgb_array frames; use env.obs=proprio")
    check_action_space(env.action_space, f"env.id: {name}")
    if isinstance(env.action_space, gymnasium.spaces.Box):
        with warnings.catch_warnings():  # "Box low's precision lowered": float64 bounds of float32 actions
            warnings.simplefilter("ignore", UserWarning)
            env = gymnasium.wrappers.RescaleAction(env, -1.0, 1.0)
    limit = env.spec.max_episode_steps if env.spec is not None else None
    if cfg["action_repeat"] > 1:
        env = ActionRepeat(env, cfg["action_repeat"])
    env = DreamerObservation(env, cfg["obs"], cfg["image_size"], name)
    env.max_steps = math.ceil(limit / cfg["action_repeat"]) if limit else NO_TIME_LIMIT_STEPS
    return env
