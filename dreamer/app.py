"""Builds the application's parts from the config and runs them."""
from __future__ import annotations

import os
import signal
import sys
import time

import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from collectors.collector import RandomPolicyFactory, build_collector
from collectors.envs import action_dim, env_factory
from collectors.replay import SequenceReplay
from dreamer.config import Config, ConfigError, validate
from dreamer.metrics import MetricsLogger


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def run(cfg: DictConfig) -> None:
    try:
        config = validate(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    # SIGTERM (a scheduler, `kill`) unwinds like Ctrl-C, so every `finally` stops the workers.
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        collect(config)
    except KeyboardInterrupt:
        print("interrupted: workers stopped", file=sys.stderr)
        sys.exit(130)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt


def collect(config: Config) -> SequenceReplay:
    """Collection into replay with a random policy: the agent and learner arrive with issue #3."""
    col, env_cfg = config.collector, config.env
    replay = SequenceReplay(col.num_envs, config.replay.capacity, config.replay.batch_size,
                            config.replay.batch_length)
    collector = build_collector(
        [env_factory(env_cfg, seed=config.seed * 10_000 + i) for i in range(col.num_envs)],
        RandomPolicyFactory(action_dim(env_cfg.domain, env_cfg.task)),
        frames_per_batch=col.frames_per_batch,
        total_frames=col.total_frames,
        chunk_size=col.chunk_size(),
        transport=col.transport,
        static_batch_size=col.inference_static_batch_size,
        policy_device=resolve_device(col.device),
        replay=replay,
    )
    run_dir = HydraConfig.get().runtime.output_dir
    metrics = make_logger(config, run_dir)
    outputs = "metrics.jsonl" + (", wandb/ (offline: `wandb sync` uploads)" if metrics.run_id else "")
    print(f"collecting {col.total_frames} env steps from {col.num_envs} x {env_cfg.name} "
          f"({col.transport}, chunk {col.chunk_size()}) with random actions; learning: issue #3")
    start, done = time.monotonic(), 0
    window = (time.monotonic(), _cpu_seconds(), 0)
    try:
        with tqdm(total=col.total_frames, unit="step", dynamic_ncols=True) as bar:
            for _ in collector:
                frames = len(replay)
                bar.update(frames - done)
                done = frames
                if done - window[2] >= config.logger.every or done >= col.total_frames:
                    window = _log_collection(metrics, window, done, replay)
    finally:
        collector.shutdown(raise_on_error=False)
        metrics.close()
    elapsed = time.monotonic() - start
    print(f"collected {done} env steps in {elapsed:.1f} s ({done / elapsed:.0f} steps/s); "
          f"replay holds {len(replay)} transitions")
    print(f"run dir: {run_dir} ({outputs})")
    return replay


def make_logger(config: Config, run_dir: str) -> MetricsLogger:
    log = config.logger
    return MetricsLogger(run_dir, backend=log.backend, mode=log.mode, project=log.project,
                         group=log.group, config=OmegaConf.to_container(OmegaConf.structured(config)))


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def _log_collection(metrics: MetricsLogger, window: tuple, done: int, replay: SequenceReplay) -> tuple:
    """Logs the window since the last call; returns the new window start."""
    now, cpu = time.monotonic(), _cpu_seconds()
    steps = max(1, done - window[2])
    metrics.log(done, {
        "collect/env_steps_per_s": steps / max(now - window[0], 1e-9),
        "collect/driver_cpu_ms_per_step": 1000 * (cpu - window[1]) / steps,
        "replay/size": len(replay),
    })
    return now, cpu, done
