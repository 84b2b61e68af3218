"""DeepMind Control (suite `dmc`) shaped for DreamerV3.

Pixels are rendered at the model's size directly (64x64) rather than at torchrl's default
240x320 and resized, and the action repeat happens below the pixel wrapper, so skipped frames
are never rendered. Output keys:
  pixels       uint8 [3, H, W]   (obs = pixels | both)
  observation  float32 [D]       (obs = proprio | both: the state vector, concatenated)
  reward       float32 [1]       (summed over the repeated actions)
  done / terminated / truncated  (DMC tasks end by time limit: truncated)
  is_init      bool [1]          (first step of an episode)
  step_count   int64 [1]         (steps since the episode began)
"""
from __future__ import annotations

import functools
import logging
import math
import os

import dm_env

from collectors.envs.suite import Suite
from patches.dmc import dreamer_dmc_env

# DreamerV3 renders quadruped from camera 2; every other domain from camera 0.
DEFAULT_CAMERAS = {"quadruped": 2}


class ActionRepeat(dm_env.Environment):
    """Repeats each action `repeat` times, summing rewards, stopping at the episode's end.

    Sits below dm_control's pixel wrapper so only the last physics state of a repeat is rendered.
    Attribute access falls through to the wrapped suite env (physics, task), as torchrl expects.
    """

    def __init__(self, env: dm_env.Environment, repeat: int):
        self._env = env
        self._repeat = repeat

    def __getattr__(self, name):
        return getattr(self._env, name)

    def reset(self):
        return self._env.reset()

    def step(self, action):
        reward, discount = 0.0, 1.0
        for _ in range(self._repeat):
            step = self._env.step(action)
            reward += step.reward or 0.0
            discount *= step.discount if step.discount is not None else 1.0
            if step.last():
                break
        return step._replace(reward=reward, discount=discount)

    def observation_spec(self):
        return self._env.observation_spec()

    def action_spec(self):
        return self._env.action_spec()

    def reward_spec(self):
        return self._env.reward_spec()

    def discount_spec(self):
        return self._env.discount_spec()


class _DmControlOwnXml(logging.Filter):
    """Drops MuJoCo's warning that dm_control's own cheetah XML sets 'settotalmass' (deprecated in
    MuJoCo 3.x): nothing a user can act on, and every load of the task logs it again."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "'settotalmass' is deprecated" not in record.getMessage()


def dm_control_suite():
    """dm_control's task suite, with MuJoCo's GL backend chosen before its first import (MuJoCo reads
    MUJOCO_GL once): EGL renders offscreen with or without a GPU (Mesa's llvmpipe on a CPU)."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    from dm_control import suite

    absl = logging.getLogger("absl")  # MuJoCo's Python bindings log its warnings there
    if not any(isinstance(f, _DmControlOwnXml) for f in absl.filters):
        absl.addFilter(_DmControlOwnXml())
    return suite


def use_fast_visuals(physics, image_size: int) -> None:
    """No shadows, reflections or multisampling, and a small offscreen buffer.

    Several times faster rendering on a CPU (llvmpipe: walker 25 -> 120 steps/s measured);
    the images differ from the paper's.
    Must run before the first render, which creates the GL context with these settings.
    """
    model = physics.model
    model.vis.quality.shadowsize = 0
    model.vis.quality.offsamples = 0
    model.vis.global_.offwidth = image_size
    model.vis.global_.offheight = image_size
    model.light_castshadow[:] = 0
    model.mat_reflectance[:] = 0


def make_dmc_env(
    domain: str,
    task: str,
    obs: str = "pixels",
    image_size: int = 64,
    action_repeat: int = 2,
    camera: int | None = None,
    fast_visuals: bool = False,
    seed: int | None = None,
    extra_transform=None,
    render_device: int | None = None,
):
    """One DMC env as a torchrl EnvBase with the keys listed in the module docstring.

    `render_device`: the GPU this process renders on (MUJOCO_EGL_DEVICE_ID), None = MuJoCo's default.
    `extra_transform`: a picklable zero-argument callable returning a transform appended last
    (the agent's recurrent-state primer: the env knows nothing about the agent).
    """
    if render_device is not None and obs in ("pixels", "both"):
        # dm_control opens its EGL display when it is first imported in a process, on the device
        # MUJOCO_EGL_DEVICE_ID names: set before that import (a worker process hosts one env).
        # torchrl's EGL_DEVICE_ID is read by neither MuJoCo nor dm_control 1.0.50.
        os.environ["MUJOCO_EGL_DEVICE_ID"] = str(render_device)
    suite = dm_control_suite()
    from dm_control.suite.wrappers import pixels as pixel_wrapper
    from torchrl.envs import (
        CatTensors,
        Compose,
        DoubleToFloat,
        InitTracker,
        PermuteTransform,
        StepCounter,
        TransformedEnv,
    )

    raw = suite.load(domain, task, task_kwargs={"random": seed})
    state_keys = list(raw.observation_spec().keys())
    env = ActionRepeat(raw, action_repeat)
    if obs in ("pixels", "both"):
        if fast_visuals:
            use_fast_visuals(raw.physics, image_size)
        if camera is None:
            camera = DEFAULT_CAMERAS.get(domain, 0)
        render_kwargs = {"height": image_size, "width": image_size, "camera_id": camera}
        env = pixel_wrapper.Wrapper(env, pixels_only=(obs == "pixels"), render_kwargs=render_kwargs)
    base = dreamer_dmc_env()(env=env)

    transforms = []
    if obs in ("proprio", "both"):
        transforms.append(CatTensors(in_keys=state_keys, out_key="observation", del_keys=True))
    transforms.append(DoubleToFloat())  # dm_control's float64 states and rewards
    if obs in ("pixels", "both"):
        # HWC -> CHW, kept uint8: 4x less replay memory than float; the model scales to [0, 1].
        transforms.append(PermuteTransform((-1, -3, -2), in_keys=["pixels"], out_keys=["pixels"]))
    transforms.append(InitTracker())
    transforms.append(StepCounter())  # step_count: episode length, and stream-order checks
    if extra_transform is not None:
        transforms.append(extra_transform())
    return TransformedEnv(base, Compose(*transforms))


def make(cfg: dict, seed: int, extra_transform=None):
    return make_dmc_env(cfg["domain"], cfg["task"], obs=cfg["obs"], image_size=cfg["image_size"],
                        action_repeat=cfg["action_repeat"], camera=cfg.get("camera"),
                        fast_visuals=cfg.get("fast_visuals", False), seed=seed, extra_transform=extra_transform,
                        render_device=cfg.get("render_device"))


@functools.lru_cache(maxsize=None)
def task_dims(domain: str, task: str) -> tuple[int, int]:
    """(proprio state vector size, action size) of a DMC task; loads it once per process."""
    suite = dm_control_suite()

    env = suite.load(domain, task)
    obs = sum(math.prod(s.shape) for s in env.observation_spec().values())
    return int(obs), int(env.action_spec().shape[0])


def spec(cfg: dict):
    from collectors.specs import EnvSpec

    vector_dim, action_dim = task_dims(cfg["domain"], cfg["task"])
    size = cfg["image_size"]
    return EnvSpec(pixels=(3, size, size) if cfg["obs"] in ("pixels", "both") else None,
                   vector_dim=vector_dim if cfg["obs"] in ("proprio", "both") else None,
                   action_dim=action_dim, discrete=False,
                   max_steps=math.ceil(1000 / cfg["action_repeat"]))  # DMC: 1,000 physics steps


def check(cfg: dict) -> None:
    suite = dm_control_suite()

    domains = sorted({d for d, _ in suite.ALL_TASKS})
    if cfg["domain"] not in domains:
        raise ValueError(f"env.domain: unknown DMC domain {cfg['domain']!r}; allowed: {', '.join(domains)}")
    tasks = sorted(t for d, t in suite.ALL_TASKS if d == cfg["domain"])
    if cfg["task"] not in tasks:
        raise ValueError(f"env.task: unknown task {cfg['task']!r} for domain {cfg['domain']!r}; "
                         f"allowed: {', '.join(tasks)}")


SUITE = Suite(observations=("pixels", "proprio", "both"), make=make, spec=spec, check=check,
              task_name=lambda cfg: f"dmc_{cfg['domain']}_{cfg['task']}",
              renders=lambda cfg: cfg["obs"] != "proprio")
