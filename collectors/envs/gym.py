"""Any registered Gymnasium env (suite `gym`): `env=gym env.id=CartPole-v1`.

Observations: a 1-D Box becomes `observation` (float32); an image Box ([H, W, C] or [H, W] uint8)
becomes `pixels`, resized to env.image_size; a Dict may hold one image and 1-D vectors. env.obs picks what the agent sees: `proprio` the
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
    """The env's observation -> {"pixels"?, "observation"?} as env.obs asks (module docstring).

    A Dict observation may hold one image and any 1-D Box vectors (concatenated in key order).
    """

    def __init__(self, env: gymnasium.Env, obs: str, size: int, name: str):
        super().__init__(env)
        self.size = size
        self.image_key, self.vector_keys = _split(env.observation_space, name)
        has_image, has_vector = self.image_key is not None, bool(self.vector_keys)
        if obs == "proprio" and not has_vector:
            raise ValueError(f"env.obs: {name} observes images only; use env.obs=pixels (got 'proprio')")
        self.vector = has_vector and obs in ("proprio", "both")
        self.image = has_image and obs in ("pixels", "both")
        self.rendered = not has_image and obs in ("pixels", "both")  # frames of a vector env
        if self.rendered and env.render_mode != "rgb_array":
            raise ValueError(f"env.obs: {name} has no rgb_array rendering for pixels; use env.obs=proprio")
        spaces = {}
        if self.image or self.rendered:
            shape = self._space(self.image_key).shape if self.image else (0, 0, 3)
            channels = 1 if len(shape) == 2 or shape[2] == 1 else 3
            spaces["pixels"] = gymnasium.spaces.Box(0, 255, (size, size, channels), np.uint8)
        if self.vector:
            dim = sum(self._space(k).shape[0] for k in self.vector_keys)
            spaces["observation"] = gymnasium.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.observation_space = gymnasium.spaces.Dict(spaces)

    def _space(self, key):
        space = self.env.observation_space
        return space if key is None or key == "" else space[key]

    def _part(self, observation, key):
        return observation if key == "" else observation[key]

    def observation(self, observation):
        out = {}
        if self.image:
            image = np.asarray(self._part(observation, self.image_key))
            image = image if image.ndim == 3 else image[..., None]
            out["pixels"] = resize(np.ascontiguousarray(image[..., :3]), self.size)
        if self.rendered:
            out["pixels"] = resize(np.ascontiguousarray(self.env.render()[..., :3]), self.size)
        if self.vector:
            out["observation"] = np.concatenate(
                [np.asarray(self._part(observation, k), np.float32).reshape(-1) for k in self.vector_keys])
        return out


def _split(space: gymnasium.Space, name: str) -> tuple[str | None, list[str]]:
    """(the image's key or None, the vectors' keys); "" is the whole (non-Dict) observation."""
    if _is_image(space):
        return "", []
    if _is_vector(space):
        return None, [""]
    if isinstance(space, gymnasium.spaces.Dict):
        images = [k for k, v in space.spaces.items() if _is_image(v)]
        vectors = [k for k, v in space.spaces.items() if _is_vector(v)]
        other = [f"{k}: {v}" for k, v in space.spaces.items() if k not in images and k not in vectors]
        if not other and len(images) <= 1 and (images or vectors):
            return (images[0] if images else None), vectors
        why = f"entries {', '.join(other)}" if other else f"{len(images)} images"
        raise ValueError(f"env.id: {name}'s observation space {space} is not supported ({why}); a Dict may "
                         "hold one uint8 image and 1-D Box vectors")
    raise ValueError(f"env.id: {name}'s observation space {space} is not supported "
                     "(a 1-D Box vector, a uint8 image Box, or a Dict of those)")


def make_gymnasium(cfg: dict, seed: int | None = None) -> gymnasium.Env:
    """The Gymnasium env of `cfg` (EnvConfig fields) with our observation dict and action range."""
    name = cfg["id"]
    env = gymnasium.make(name)
    image, _ = _split(env.observation_space, name)
    if image is None and cfg["obs"] in ("pixels", "both"):  # frames of a vector env: its rgb_array renders
        if "rgb_array" not in env.metadata.get("render_modes", []):
            env.close()
            raise ValueError(f"env.obs: {name} has no rgb_array rendering for pixels; use env.obs=proprio")
        env.close()
        env = gymnasium.make(name, render_mode="rgb_array")
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
