"""The env suites: one module each in collectors/envs/, each exporting `SUITE`, found by that name
(`SUITE_MODULES`, read from the files without importing them). Every other module asks
`suite(name)`; adding a suite is one module and one yaml in conf/env/ (docs/environments.md shows
a worked example). A module that serves several `env.suite` values lists them in `SUITE_NAMES`.

A suite module's top level stays torch-free (start-up checks and `env_spec` run before torch
loads): it imports torchrl inside `make`.
"""
from __future__ import annotations

import ast
import functools
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable


def discover(directory: Path) -> dict[str, str]:
    """env.suite values -> module name, for every module in `directory` that assigns `SUITE` at its
    top level: its own name, or the names its `SUITE_NAMES` tuple lists."""
    found = {}
    for path in sorted(directory.glob("*.py")):
        top = {target.id: node.value for node in ast.parse(path.read_text()).body if isinstance(node, ast.Assign)
               for target in node.targets if isinstance(target, ast.Name)}
        if "SUITE" in top:
            names = ast.literal_eval(top["SUITE_NAMES"]) if "SUITE_NAMES" in top else (path.stem,)
            found.update({name: path.stem for name in names})
    return found


# env.suite values -> the module in collectors/envs/ that serves them (a test may add a dotted path)
SUITE_MODULES = discover(Path(__file__).parent)


def _no_check(cfg: dict) -> None:
    pass


def _suite_task(cfg: dict) -> str:
    return f"{cfg['suite']}_{cfg['task']}"


def _no_rendering(cfg: dict) -> bool:
    return False


@dataclass(frozen=True)
class Suite:
    """What the app needs from a suite. `cfg` is a plain dict of EnvConfig's fields (dreamer/config/env.py)
    plus the factory's extras (worker, render_device, ...). A problem with the user's settings raises
    ValueError("env.<key>: what is wrong"), which start-up turns into `error: config key 'env.<key>'`."""
    observations: tuple[str, ...]  # the env.obs values it supports
    make: Callable[[dict, int, Any], Any]  # (cfg, seed, extra_transform) -> a torchrl env with the app's keys
    spec: Callable[[dict], Any]  # cfg -> collectors.specs.EnvSpec (torch-free; may load the task)
    check: Callable[[dict], None] = _no_check  # start-up: the task exists, the settings fit
    task_name: Callable[[dict], str] = _suite_task  # the official score files' name: dmc_walker_walk
    renders: Callable[[dict], bool] = _no_rendering  # renders with MuJoCo's EGL (GPU placement applies)


def suite(name: str) -> Suite:
    if name not in SUITE_MODULES:
        raise ValueError(f"env.suite: allowed values are {', '.join(SUITE_MODULES)} (got {name!r})")
    return _load(SUITE_MODULES[name])


@functools.lru_cache(maxsize=None)
def _load(module: str) -> Suite:
    return importlib.import_module(module if "." in module else f"collectors.envs.{module}").SUITE


def task_name(cfg: dict) -> str:
    """The task's name in the official score files (dmc_walker_walk, gym_CartPole-v1, atari100k_pong)."""
    return suite(cfg.get("suite", "dmc")).task_name(cfg)
