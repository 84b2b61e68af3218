"""Any registered Gymnasium env (suite `gym`): `env=gym env.id=CartPole-v1`.

Observations: a 1-D Box becomes `observation` (float32); an image Box ([H, W, C] or [H, W] uint8)
becomes `pixels`, resized to env.image_size; a Discrete becomes a one-hot in `observation`; a Dict
may hold one image, 1-D vectors and Discretes (concatenated in key order) and string entries (Text,
MiniGrid's mission: left out, named at start-up). env.obs picks what the agent sees: `proprio` the
vector, `pixels` the image (the env's own, or its `render_mode="rgb_array"` frames for a vector
env), `both`, or `symbolic`: the image's numbers flattened into `observation` with the rest, for a
grid of object codes that is not a picture (MiniGrid). Actions: Discrete (one-hot) or a bounded 1-D
Box, rescaled to [-1, 1]. Episodes end as Gymnasium says: `terminated` (continue target 0) or
`truncated` (its TimeLimit, or the env's own `max_steps` as in MiniGrid).
"""
from __future__ import annotations

import difflib
import importlib
import math
import warnings
from dataclasses import dataclass, field

import gymnasium
import numpy as np

from collectors.envs.common import ActionRepeat, check_action_space, gymnasium_suite, resize

NO_TIME_LIMIT_STEPS = 100_000  # evaluation's cap for an env registered without a time limit
# Packages whose import registers these ids, so that env.id=MiniGrid-Empty-8x8-v0 works as it is.
REGISTERING_PACKAGES = {"MiniGrid-": "minigrid", "BabyAI-": "minigrid"}


def register_package_of(env_id: str) -> None:
    """Imports the package that registers `env_id` (REGISTERING_PACKAGES) if it is not registered yet."""
    for prefix, package in REGISTERING_PACKAGES.items():
        if env_id.startswith(prefix) and env_id not in gymnasium.registry:
            importlib.import_module(package)


def _is_image(space: gymnasium.Space) -> bool:
    return (isinstance(space, gymnasium.spaces.Box) and space.dtype == np.uint8
            and (len(space.shape) == 2 or (len(space.shape) == 3 and space.shape[2] in (1, 3, 4))))


def _is_vector(space: gymnasium.Space) -> bool:
    return isinstance(space, gymnasium.spaces.Box) and len(space.shape) == 1


def _is_text(space: gymnasium.Space) -> bool:
    """String-valued: gymnasium's Text, or a custom Space of strings (MiniGrid's MissionSpace)."""
    if isinstance(space, gymnasium.spaces.Text):
        return True
    if type(space).__module__.startswith("gymnasium.spaces"):
        return False
    try:
        return isinstance(space.sample(), str)
    except Exception:  # a space that cannot sample is not one we can read either
        return False


@dataclass
class Layout:
    """Where an observation's parts go; keys are Dict keys, "" the whole (non-Dict) observation."""
    image: str | None = None
    vectors: list[str] = field(default_factory=list)  # 1-D Boxes and Discretes, in key order
    text: list[str] = field(default_factory=list)  # left out


def _layout(space: gymnasium.Space, name: str) -> Layout:
    if _is_image(space):
        return Layout(image="")
    if _is_vector(space) or isinstance(space, gymnasium.spaces.Discrete):
        return Layout(vectors=[""])
    if isinstance(space, gymnasium.spaces.Dict):
        layout, other = Layout(), []
        for key, sub in space.spaces.items():
            if _is_image(sub) and layout.image is None:
                layout.image = key
            elif _is_vector(sub) or isinstance(sub, gymnasium.spaces.Discrete):
                layout.vectors.append(key)
            elif _is_text(sub):
                layout.text.append(key)
            else:
                other.append(f"{key}: {sub}" if not _is_image(sub) else f"{key}: a second image")
        if not other and (layout.image is not None or layout.vectors):
            return layout
        why = f"entries {', '.join(other)}" if other else "only text entries"
        raise ValueError(f"env.id: {name}'s observation space {space} is not supported ({why}); a Dict may "
                         "hold one uint8 image, 1-D Box vectors, Discretes and text")
    raise ValueError(f"env.id: {name}'s observation space {space} is not supported "
                     "(a 1-D Box vector, a uint8 image Box, a Discrete, or a Dict of those)")


def _width(space: gymnasium.Space) -> int:
    return int(space.n) if isinstance(space, gymnasium.spaces.Discrete) else math.prod(space.shape)


def _flat(space: gymnasium.Space, value) -> np.ndarray:
    """One part of the vector: a Discrete one-hot, a Box's numbers flattened, as float32."""
    if isinstance(space, gymnasium.spaces.Discrete):
        onehot = np.zeros(int(space.n), np.float32)
        onehot[int(value) - int(space.start)] = 1.0
        return onehot
    return np.asarray(value, np.float32).reshape(-1)


class DreamerObservation(gymnasium.ObservationWrapper):
    """The env's observation -> {"pixels"?, "observation"?} as env.obs asks (module docstring).

    Each part it reads is checked against the env's observation space first (an env whose
    observations change shape mid-run would otherwise fail deep inside torchrl): an error naming the
    key, the env (`where`), its env step and the shapes or dtypes.
    """

    def __init__(self, env: gymnasium.Env, obs: str, size: int, name: str, render: bool = False,
                 where: str | None = None):
        super().__init__(env)
        self.size, self.where, self.steps = size, where or name, 0
        layout = _layout(env.observation_space, name)
        self.text_keys = tuple(layout.text)
        has_image, has_vector = layout.image is not None, bool(layout.vectors)
        if obs == "proprio" and not has_vector:
            hint = "env.obs=symbolic (a grid of codes) or env.obs=pixels (a picture)"
            raise ValueError(f"env.obs: {name} observes an image only; use {hint} (got 'proprio')")
        self.vector_keys = list(layout.vectors) if obs in ("proprio", "both", "symbolic") else []
        if obs == "symbolic" and has_image:
            self.vector_keys = sorted(self.vector_keys + [layout.image], key=list(_keys(env)).index)
        self.image_key = layout.image if has_image and obs in ("pixels", "both") else None
        # frames of a vector env, or (render: evaluation videos) of a symbolic one
        self.rendered = (not has_image and obs in ("pixels", "both")) or (render and obs == "symbolic")
        if self.rendered and env.render_mode != "rgb_array":
            raise ValueError(f"env.obs: {name} has no rgb_array rendering for pixels; use env.obs=proprio")
        spaces = {}
        if self.image_key is not None or self.rendered:
            shape = self._space(self.image_key).shape if self.image_key is not None else (0, 0, 3)
            channels = 1 if len(shape) == 2 or shape[2] == 1 else 3
            spaces["pixels"] = gymnasium.spaces.Box(0, 255, (size, size, channels), np.uint8)
        if self.vector_keys:
            dim = sum(_width(self._space(k)) for k in self.vector_keys)
            spaces["observation"] = gymnasium.spaces.Box(-np.inf, np.inf, (dim,), np.float32)
        self.observation_space = gymnasium.spaces.Dict(spaces)

    def _space(self, key):
        return self.env.observation_space if key == "" else self.env.observation_space[key]

    def step(self, action):
        self.steps += 1
        return super().step(action)

    def _part(self, observation, key: str):
        """One entry of the observation, checked against its space."""
        value = observation if key == "" else observation[key]
        space, name = self._space(key), "the observation" if key == "" else f"observation entry {key}"
        if isinstance(space, gymnasium.spaces.Discrete):
            if not (np.ndim(value) == 0 and np.issubdtype(np.asarray(value).dtype, np.integer)
                    and space.start <= int(value) < space.start + space.n):
                raise self._fault(f"{name} is {value!r}, outside its space {space}")
            return value
        value = np.asarray(value)
        if value.shape != space.shape:
            raise self._fault(f"{name} has shape {value.shape}; its space says {space.shape}")
        if key == self.image_key and value.dtype != space.dtype:  # pixels: uint8 as the space promised
            raise self._fault(f"{name} has dtype {value.dtype}; its space says {space.dtype}")
        return value

    def _fault(self, what: str) -> Exception:
        from collectors.envs.guard import SPEC_MARK, EnvSpecChanged  # torch: not at start-up's import

        when = f"env step {self.steps}" if self.steps else "a reset"
        return EnvSpecChanged(f"{SPEC_MARK}{what}, from {self.where} at {when}")

    def observation(self, observation):
        out = {}
        if self.image_key is not None:
            image = self._part(observation, self.image_key)
            image = image if image.ndim == 3 else image[..., None]
            out["pixels"] = resize(np.ascontiguousarray(image[..., :3]), self.size)
        if self.rendered:
            out["pixels"] = resize(np.ascontiguousarray(self.env.render()[..., :3]), self.size)
        if self.vector_keys:
            out["observation"] = np.concatenate(
                [_flat(self._space(k), self._part(observation, k)) for k in self.vector_keys])
        return out


def _keys(env: gymnasium.Env) -> list[str]:
    space = env.observation_space
    return list(space.spaces) if isinstance(space, gymnasium.spaces.Dict) else [""]


def _time_limit(env: gymnasium.Env) -> int | None:
    """Gymnasium's TimeLimit, else the env's own limit (MiniGrid truncates at `max_steps`)."""
    if env.spec is not None and env.spec.max_episode_steps:
        return env.spec.max_episode_steps
    own = getattr(env.unwrapped, "max_steps", None)
    return own if isinstance(own, int) and own > 0 else None


def make_gymnasium(cfg: dict, seed: int | None = None) -> gymnasium.Env:
    """The Gymnasium env of `cfg` (EnvConfig fields) with our observation dict and action range."""
    name = cfg["id"]
    register_package_of(name.rpartition(":")[2])
    env = gymnasium.make(name)
    image = _layout(env.observation_space, name).image
    render = bool(cfg.get("render_pixels")) and cfg["obs"] == "symbolic"
    if (image is None and cfg["obs"] in ("pixels", "both")) or render:  # frames: its rgb_array renders
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
    limit = _time_limit(env)
    if cfg["action_repeat"] > 1:
        env = ActionRepeat(env, cfg["action_repeat"])
    env = DreamerObservation(env, cfg["obs"], cfg["image_size"], name, render=render, where=cfg.get("where"))
    env.max_steps = math.ceil(limit / cfg["action_repeat"]) if limit else NO_TIME_LIMIT_STEPS
    return env


def check(cfg: dict) -> None:
    """Start-up: the id names a registered env (importing `module:` first, as `make` does)."""
    if not cfg.get("id"):
        raise ValueError("env.id: the gym suite needs a Gymnasium env id, e.g. env.id=CartPole-v1")
    module, _, env_id = cfg["id"].rpartition(":")  # "my_package:MyEnv-v0" registers on import
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(f"env.id: cannot import {module!r} to register {env_id!r}: {err}") from err
    try:
        register_package_of(env_id)
    except ImportError as err:
        raise ValueError(f"env.id: {env_id!r} is registered by a package that is not installed: {err}") from err
    if env_id not in gymnasium.registry:
        close = difflib.get_close_matches(env_id, list(gymnasium.registry), n=5, cutoff=0.5)
        raise ValueError(f"env.id: {cfg['id']!r} is not a registered Gymnasium env id"
                         + (f"; closest registered ids: {', '.join(close)}" if close else "")
                         + " (import your env's package first, or register it)")


SUITE = gymnasium_suite(make_gymnasium, ("pixels", "proprio", "both", "symbolic"), check=check,
                        task_name=lambda cfg: f"gym_{cfg['id']}")
