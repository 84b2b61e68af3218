"""Where each part of a run goes on a node: the learner's and the inference server's devices, and
the GPU each env worker renders on.

MuJoCo (and dm_control 1.0.50) pick the EGL device from `MUJOCO_EGL_DEVICE_ID` when a process first
renders; torchrl's dm_control module sets `EGL_DEVICE_ID`, which neither reads, so without this
every worker renders on the first GPU. Worker i renders on `env.render_devices[i % n]` (default
"all": every GPU of the node, round-robin). The variable must be set before dm_control is first
imported in a process (it opens its EGL display then): true of a worker, which hosts one env; the
training process's evaluator renders on MuJoCo's default GPU.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Optional

from collectors.envs.suite import suite as env_suite
from dreamer.config.errors import _check

RENDER_ENV_VAR = "MUJOCO_EGL_DEVICE_ID"


def resolve_device(name: str, local_rank: int | None = None) -> str:
    """auto -> cuda if available else cpu; a plain `cuda` of a data-parallel rank -> cuda:<local rank>."""
    if name == "auto":
        import torch

        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        return f"cuda:{local_rank}"
    return name


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count()


def _index(device: str) -> Optional[int]:
    """N of "cuda:N"; 0 for "cuda"; None for cpu/auto."""
    if device == "cuda":
        return 0
    if device.startswith("cuda:"):
        return int(device.split(":", 1)[1])
    return None


def render_list(render_devices: Any, gpus: int) -> list[int]:
    """The GPUs workers render on ([] = MuJoCo's default: the first GPU, or the CPU renderer)."""
    if render_devices == "all":
        return list(range(gpus))
    return [int(d) for d in render_devices]


def render_device(worker: int, render_devices: Any, gpus: int, local_rank: Optional[int] = None) -> Optional[int]:
    """Worker `worker`'s GPU. A data-parallel rank's workers render on the rank's own GPU by
    default ("all"); a list of devices is taken as given (round-robin by global worker index)."""
    if local_rank is not None and render_devices == "all" and gpus > 0:
        return local_rank % gpus
    devices = render_list(render_devices, gpus)
    return devices[worker % len(devices)] if devices else None


def check(config: Any, gpus: Optional[int] = None) -> None:
    """Device indices exist on this node (torch is imported only when an explicit GPU is named)."""
    explicit = [(key, dev) for key, dev in (("learner.device", config.learner.device),
                                             ("collector.device", config.collector.device))
                if _index(dev) is not None]
    render = config.env.render_devices
    if not isinstance(render, (str, int)) and hasattr(render, "__iter__"):
        render = list(render)  # a list, tuple or OmegaConf ListConfig
    _check(render == "all" or (isinstance(render, list) and all(isinstance(d, int) and d >= 0 for d in render)),
           "env.render_devices", f"all, or a list of GPU indices like [0, 1] (got {render!r})")
    if not explicit and render == "all":
        return
    gpus = gpu_count() if gpus is None else gpus
    for key, device in explicit:
        index = _index(device)
        _check(gpus > 0, key, f"{device} needs a CUDA GPU and this machine has none; use auto or cpu")
        _check(index < gpus, key, f"{device} does not exist: this machine has {gpus} CUDA GPU(s) (cuda:0..cuda:{gpus - 1})")
    if render != "all":
        bad = [d for d in render if d >= gpus]
        _check(not bad, "env.render_devices", f"GPU(s) {bad} do not exist: this machine has {gpus} CUDA GPU(s)")


def describe(config: Any, learner_device: str, inference_device: str, gpus: int) -> str:
    """One line: what runs where."""
    devices = render_list(config.env.render_devices, gpus)
    renders = env_suite(config.env.suite).renders(dataclasses.asdict(config.env))
    if not renders:
        where = "no rendering"
    elif devices:
        where = f"workers render on GPU {', '.join(map(str, devices))} ({RENDER_ENV_VAR}, round-robin)"
    else:
        where = "workers render on the CPU (EGL, Mesa llvmpipe)"
    return f"placement: learner on {learner_device}, inference server on {inference_device}, {where}"
