"""Structured config schema: one dataclass per config group (dreamer/config/groups.py,
dreamer/config/env.py) joined in Config, registered in Hydra's ConfigStore.

Hydra rejects unknown keys and wrong types while composing (struct mode). Range checks and
cross-field checks live in `__post_init__` and `validate()`, which `dreamer.run.app` runs once at
start-up, so a bad override fails in the first second with the key's name.
"""
from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf

from dreamer.config.env import EnvConfig, check_task, task_name  # noqa: F401  (re-exported)
from dreamer.config.errors import ConfigError, _check  # noqa: F401  (re-exported)
from dreamer.config.groups import (  # noqa: F401  (re-exported: the schema's one import)
    CheckpointConfig,
    CollectorConfig,
    EvalConfig,
    LearnerConfig,
    LoggerConfig,
    ReplayConfig,
    WorldModelConfig,
)


@dataclass
class Config:
    env: EnvConfig = field(default_factory=EnvConfig)
    collector: CollectorConfig = field(default_factory=CollectorConfig)
    world_model: WorldModelConfig = field(default_factory=WorldModelConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    seed: int = 0  # seeds torch, the envs and the replay sampler
    resume: Optional[str] = None  # short for checkpoint.resume

    def __post_init__(self) -> None:
        """Checks that need several groups at once."""
        if self.resume is not None:
            _check(os.path.exists(self.resume), "resume", f"no such file or directory: {self.resume}")
            _check(self.checkpoint.resume in (None, self.resume), "resume",
                   "give resume= or checkpoint.resume=, not two different paths")
            self.checkpoint.resume = self.resume
        col, rep = self.collector, self.replay
        _check(col.chunk_size() <= col.frames_per_batch, "collector.transition_chunk_size",
               f"must be <= collector.frames_per_batch={col.frames_per_batch} (got {col.chunk_size()})")
        _check(col.frames_per_batch >= col.num_envs, "collector.frames_per_batch",
               f"must be >= collector.num_envs={col.num_envs} (got {col.frames_per_batch})")
        if self.learner.cudagraph is True:
            import torch

            _check(torch.cuda.is_available(), "learner.cudagraph",
                   "true needs a CUDA GPU and none is available; use auto or false on this machine")
        if col.inference_static_batch_size is not None:
            _check(col.transport == "process_slot", "collector.inference_static_batch_size",
                   "needs collector.transport=process_slot")
            import torch

            cuda = col.device.startswith("cuda") or (col.device == "auto" and torch.cuda.is_available())
            _check(cuda, "collector.inference_static_batch_size",
                   "fixed-size (padded) inference batches need a CUDA inference device (collector.device); "
                   "use null on a CPU machine")
        world = int(os.environ.get("WORLD_SIZE", "1"))  # torchrun's ranks (dreamer/run/distributed.py)
        if world > 1:
            _check(rep.batch_size % world == 0, "replay.batch_size",
                   f"is the global batch over the {world} ranks and must divide by the world size (got "
                   f"{rep.batch_size}); e.g. replay.batch_size={max(world, rep.batch_size // world * world)}")
            _check(col.num_envs % world == 0, "collector.num_envs",
                   f"is the envs over all {world} ranks and must divide by the world size (got {col.num_envs})")
            _check(col.frames_per_batch % world == 0, "collector.frames_per_batch",
                   f"is over all {world} ranks and must divide by the world size (got {col.frames_per_batch})")
        need = (rep.batch_length + 1) * col.num_envs
        _check(rep.capacity >= need, "replay.capacity",
               f"must hold at least one sequence (replay.batch_length + 1 records) per env: >= {need} "
               f"(got {rep.capacity})")


def register_configs() -> None:
    ConfigStore.instance().store(name="schema", node=Config)
    # `${sum:a,b}`: launcher resources computed from the config (conf/hydra/launcher/slurm.yaml)
    OmegaConf.register_new_resolver("sum", lambda *xs: sum(xs), replace=True)
    # `${task_name:...}`: the run directory's name (conf/config.yaml), safe as one path component
    OmegaConf.register_new_resolver(
        "task_name", lambda *args: task_name(*args).replace("/", "-").replace(":", "-"), replace=True)


def validate_or_exit(cfg: DictConfig) -> Config:
    """validate() and the replay's RAM or disk check, or the key's error on stderr and exit status 2."""
    from hydra.core.hydra_config import HydraConfig

    from dreamer.config.replay_plan import check_replay_fits, replay_storage

    try:
        config = validate(cfg)
        config.replay.storage = replay_storage(config)  # auto decided once, for this machine
        check_replay_fits(config, HydraConfig.get().runtime.output_dir if HydraConfig.initialized() else None)
        return config
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        remove_unused_run_dir()
        sys.exit(2)


HYDRA_FILES = {"config.yaml", "hydra.yaml", "overrides.yaml"}


def remove_unused_run_dir() -> None:
    """A rejected config leaves no run dir behind: Hydra made outputs/<day>/<run> (its .hydra/ and an
    empty log) before the config was checked. Only that default layout: a dir the user named
    (hydra.run.dir) may be theirs, and one holding anything else (an earlier run) stays too."""
    import re
    import shutil
    from pathlib import Path

    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return
    hydra = HydraConfig.get()
    run_dir, log = Path(hydra.runtime.output_dir), f"{hydra.job.name}.log"
    day = run_dir.parent
    if not (re.fullmatch(r"\d{4}-\d{2}-\d{2}", day.name) and day.parent.name == "outputs" and run_dir.is_dir()):
        return
    if not {p.name for p in run_dir.iterdir()} <= {hydra.output_subdir, log}:
        return
    if (run_dir / log).exists() and (run_dir / log).stat().st_size:
        return
    subdir = run_dir / hydra.output_subdir if hydra.output_subdir else None
    if subdir and subdir.exists() and not {p.name for p in subdir.iterdir()} <= HYDRA_FILES:
        return
    shutil.rmtree(run_dir)
    for empty in (day, day.parent):  # outputs/<day>, then outputs/, if nothing else is in them
        try:
            empty.rmdir()
        except OSError:
            return


def _check_actions(config: "Config") -> None:
    from collectors.specs import env_spec

    if env_spec(config.env).discrete:
        _check(config.learner.actor_grad in ("reinforce", "auto"), "learner.actor_grad",
               f"{config.env.name} has discrete actions, which train with REINFORCE only; use reinforce or auto "
               f"(got {config.learner.actor_grad!r})")


def validate(cfg: DictConfig) -> Config:
    """Turns the composed DictConfig into checked dataclasses (runs every __post_init__)."""
    config = OmegaConf.to_object(cfg)
    check_task(config.env)  # here, not in EnvConfig: loads the suite
    _check_actions(config)
    from dreamer.config import placement

    placement.check(config)
    return config
