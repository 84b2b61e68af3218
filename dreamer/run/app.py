"""Builds the application's parts from the config and runs them."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import time
import traceback
from pathlib import Path
from typing import NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

import patches
from collectors.envs.guard import fault_line
from collectors.watchdog import CollectorFault
from dreamer.config import Config, ConfigError
from dreamer.config.replay_plan import replay_dir, replay_plan, replay_storage
from dreamer.io import checkpoint
from dreamer.io.disk import DiskFullError
from dreamer.io.metrics import MetricsLogger, sweep_group_name
from dreamer.run.distributed import RankLostError
from dreamer.run.loop import train
from dreamer.run.stop import StopRequest
from dreamer.run.trainer import STATE_KEYS
from dreamer.run.updates import NonFiniteLossError

# Sections a checkpoint's networks and replay depend on: resuming with other values cannot work.
MUST_MATCH_ON_RESUME = ("env", "world_model")


def run(config: Config, stop: StopRequest | None = None) -> None:
    """Trains one run of a validated config (train.py validates before importing torch)."""
    # Ctrl-C and SIGTERM (a scheduler, `kill`): workers stop, a final checkpoint is written.
    stop = stop or StopRequest().install()
    quiet_resource_tracker()
    exit_if_stopped(stop)  # during the imports: nothing started yet
    world = connect_ranks(config)
    try:
        state = load_resume_state(config, world.size, world.rank)
    except (ConfigError, checkpoint.CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    # Rank 0's run dir is the run's (Hydra names one per process, from its start time).
    own_dir = HydraConfig.get().runtime.output_dir
    run_dir = world.broadcast_object(own_dir)
    if own_dir != run_dir and os.path.basename(own_dir).startswith("dreamer-rank"):
        shutil.rmtree(own_dir, ignore_errors=True)  # train.py's placeholder for ranks > 0
    if world.is_main:
        try:
            check_run_dir(run_dir, checkpoint_bytes(config))
        except ConfigError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
    exit_if_stopped(stop)
    metrics = make_logger(config, run_dir, run_id=state["run_id"] if state else None) if world.is_main else None
    wandb_offline = metrics is not None and config.logger.mode == "offline" and metrics.run_id is not None
    if world.is_main:
        describe(config, state, world.size)
        patches.check_versions()  # a library other than the one a workaround was written for
    start = time.monotonic()
    try:
        trainer = train(config, run_dir, metrics, resume=state, stop=stop, world=world)
        if metrics is not None:
            metrics.close()
    except KeyboardInterrupt:
        _close_quietly(metrics)
        print("interrupted: workers stopped", file=sys.stderr)
        # Checkpoint written, workers and wandb stopped. A stop during the CPU torch.compile of the
        # first update leaves inductor's native threads mid-work; the interpreter's teardown then
        # aborted once (SIGABRT instead of exit 130). Nothing is left to clean up, so skip it.
        _exit_now(130)
    except CollectorFault as err:
        # The dead process may hold one of the collector's shared locks: any later cleanup of the
        # collector (even a generator's finaliser at interpreter exit) would wait on it forever.
        fix = "fix the env" if fault_line(err) else "fix the cause"  # an env's fault that ended the workers
        _fail(run_dir, metrics, f"{err}; {last_good_checkpoint(run_dir, fix=fix)}", hard=True)
    except RankLostError as err:  # the process group is broken: its teardown could wait on the lost rank
        _fail(run_dir, metrics, str(err), hard=True)
    except NonFiniteLossError as err:
        _fail(run_dir, metrics, f"{err}; stopped with a checkpoint of the last finite weights")
    except DiskFullError as err:  # workers are stopped by now; the save left no partial file
        _fail(run_dir, metrics, f"{err}; {last_good_checkpoint(run_dir)}")
    except MemoryError:
        _fail(run_dir, metrics, "this process ran out of memory (MemoryError); lower replay.capacity, "
              f"replay.batch_size or the model size; {last_good_checkpoint(run_dir, fix='free memory')}", hard=True)
    except Exception as err:
        line = fault_line(err)  # an env's fault, wrapped by the collector's worker errors
        if line is None:
            _close_quietly(metrics)
            raise  # a defect of the app: Hydra prints the traceback
        # the worker that raised is gone: the collector's own teardown is done
        _fail(run_dir, metrics, f"{line}; {last_good_checkpoint(run_dir, fix='fix the env')}", hard=True)
    except BaseException:
        _close_quietly(metrics)
        raise
    world.close()
    if not world.is_main:
        return
    elapsed = time.monotonic() - start
    print(f"trained to {trainer.frames} env steps ({trainer.updates} updates) in {elapsed:.0f} s")
    outputs = "metrics.jsonl, checkpoints/, videos/" + (", wandb/ (offline: `wandb sync` uploads)"
                                                         if wandb_offline else "")
    print(f"run dir: {run_dir} ({outputs})")


def quiet_resource_tracker() -> None:
    """After an error's hard exit (_exit_now), multiprocessing's resource tracker unlinks the shared
    semaphores the collector left and warns about each batch ("leaked semaphore objects"): noise
    under the run's one error line. Its process inherits this filter (set before it starts)."""
    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"
    current = os.environ.get("PYTHONWARNINGS", "")
    if quiet not in current:
        os.environ["PYTHONWARNINGS"] = f"{current},{quiet}" if current else quiet


def connect_ranks(config: Config):
    """torchrun's ranks (dreamer/run/distributed.py), or the single process of a plain run."""
    from dreamer.config.placement import resolve_device
    from dreamer.run.distributed import connect

    return connect(cuda=resolve_device(config.learner.device).startswith("cuda"))


def _close_quietly(metrics: MetricsLogger | None) -> None:
    """Close files and wandb on an error path: a second error (a full disk) must not hide the first.
    Python's logging prints a traceback for every record a handler fails to write (wandb's own log
    files on a full disk, while it shuts down): not on this path."""
    logging.raiseExceptions = False
    if metrics is None:
        return
    with contextlib.suppress(Exception):
        metrics.close()


def last_good_checkpoint(run_dir: str, fix: str = "free space") -> str:
    directory = os.path.join(run_dir, "checkpoints")
    newest = checkpoint.latest(directory)
    if newest is None:
        return f"no checkpoint was written in this run dir; {fix} and start again"
    step = int(checkpoint.NAME.match(newest.name).group(1))
    return (f"last good checkpoint: {newest} (env step {step}); {fix}, then resume={directory} "
            "continues the run")


def _fail(run_dir: str, metrics: MetricsLogger | None, line: str, code: int = 1, hard: bool = False) -> NoReturn:
    """One `error:` line on the terminal; the traceback in the run dir's train.log (and on the terminal
    with HYDRA_FULL_ERROR=1). `hard`: exit without the interpreter's teardown (_exit_now)."""
    _close_quietly(metrics)
    trace = traceback.format_exc()
    with contextlib.suppress(OSError), open(os.path.join(run_dir, "train.log"), "a") as log:
        log.write(f"error: {line}\n{trace}\n")
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        print(trace, file=sys.stderr)
    print(f"error: {line}", file=sys.stderr)
    if hard:
        _exit_now(code)
    sys.exit(code)


def _exit_now(code: int) -> None:
    """Exit without the interpreter's teardown, once everything that matters is closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def checkpoint_bytes(config: Config) -> int:
    """Disk a run's checkpoints may take: `keep` of them plus one being written, each with the
    replay when it is saved (in RAM: up to checkpoint.replay_max_gb; on disk a checkpoint only
    locates the files), plus ~100 MB for networks and optimizer."""
    ckpt = config.checkpoint
    _, replay = replay_plan(config)
    in_checkpoint = ckpt.replay and replay_storage(config) == "memory" and replay <= ckpt.replay_max_gb * 2**30
    replay = replay if in_checkpoint else 0
    return (ckpt.keep + 1) * (replay + 100 * 2**20)


def check_run_dir(run_dir: str, need: int) -> None:
    """Before any worker starts: the run dir is writable and has room for the checkpoints."""
    probe = os.path.join(run_dir, ".write-test")
    try:
        os.makedirs(run_dir, exist_ok=True)
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise ConfigError("hydra.run.dir", f"cannot write to {run_dir}: {err.strerror}") from err
    free = shutil.disk_usage(run_dir).free
    if free < need:
        raise ConfigError("hydra.run.dir", f"{run_dir} has {free / 1e9:.1f} GB free, checkpoints need up to "
                          f"{need / 1e9:.1f} GB (checkpoint.keep + 1 copies; lower checkpoint.keep or "
                          "checkpoint.replay_max_gb, or pick another hydra.run.dir)")


def exit_if_stopped(stop: StopRequest) -> None:
    if stop.requested:
        print(f"interrupted ({stop.signal_name}) before training started", file=sys.stderr)
        sys.exit(130)


def load_resume_state(config: Config, world_size: int = 1, rank: int = 0) -> dict | None:
    if config.checkpoint.resume is None:
        return None
    state = checkpoint.load(config.checkpoint.resume, required=STATE_KEYS)
    saved_world = state.get("world_size", 1)
    if state["replay"] is not None and saved_world != world_size:
        raise ConfigError("resume", f"the checkpoint holds the replay of a {saved_world}-process run; resume it "
                          f"with {saved_world} process(es), or from a checkpoint written with checkpoint.replay=false")
    # the replay files of each rank (one locator per rank; a single process's is rank 0's)
    located = state.get("replay_disk_ranks") or ([state["replay_disk"]] if state.get("replay_disk") else None)
    state["replay_disk"] = None
    if located is not None and config.checkpoint.replay and len(located) != world_size:
        state["replay_note"] = (f"the checkpoint's replay is that of {len(located)} process(es), this run has "
                                f"{world_size}: each rank refills its replay (learner.prefill_frames) first")
    elif located is not None and config.checkpoint.replay:
        # the run goes on in the checkpoint's replay files (replay/disk.py); every rank
        # checks every rank's files, so a bad file stops all ranks with the same line
        from replay import disk as replay_disk

        resume = Path(config.checkpoint.resume)
        run_dir = (resume if resume.is_dir() else resume.parent).parent
        for r, disk in enumerate(located):
            try:
                replay_disk.check_files(disk, replay_disk.resolve_dir(disk, run_dir))
            except replay_disk.ReplayFilesError as err:
                raise ConfigError("resume", f"{err}; checkpoint.replay=false resumes without the replay") from None
        state["replay_disk"] = located[rank]
        state["replay_dir"] = replay_disk.resolve_dir(located[rank], run_dir)
        config.replay.storage = "disk"
    disk = state["replay_disk"]
    now = OmegaConf.to_container(OmegaConf.structured(config))
    keys = [(section, key) for section in MUST_MATCH_ON_RESUME for key in state["config"][section]]
    if state["replay"] is not None or disk is not None:  # one replay stream per env
        keys.append(("collector", "num_envs"))
    if disk is not None:  # the files' ring size
        keys.append(("replay", "capacity"))
    for section, key in keys:
        saved, current = state["config"][section][key], now[section].get(key)
        if current != saved:
            raise ConfigError(f"{section}.{key}", f"the checkpoint was trained with {saved!r}, this run has "
                              f"{current!r}; resume with the same value")
    return state


def describe(config: Config, state: dict | None, world_size: int = 1) -> None:
    col, env = config.collector, config.env
    start = f"resuming at {state['frames']} env steps, {state['updates']} updates; " if state else ""
    print(f"{start}training {config.world_model.size} DreamerV3 on {env.name} ({env.obs}) for {col.total_frames} "
          f"env steps: {col.num_envs} envs ({col.transport}, chunk {col.chunk_size()}), "
          f"train ratio {config.learner.train_ratio:g}")
    from collectors.specs import env_spec

    text = env_spec(env).text_keys
    if text:
        print(f"warning: env.id: {env.id}'s observation entries {', '.join(text)} hold text, which the agent "
              "does not read: left out")
    if world_size > 1:
        print(f"data parallel over {world_size} ranks: each runs {col.num_envs // world_size} envs and samples "
              f"{config.replay.batch_size // world_size} of the {config.replay.batch_size} sequences per update")
    import torch

    from dreamer.config import placement
    from dreamer.config.placement import resolve_device

    print(placement.describe(config, resolve_device(config.learner.device), resolve_device(col.device),
                             torch.cuda.device_count()))
    per, total = replay_plan(config)
    where = (f"on disk in {state['replay_dir']} (the checkpoint's files)" if state and state.get("replay_dir") else
             f"on disk in {replay_dir(config, HydraConfig.get().runtime.output_dir)}" if config.replay.storage == "disk"
             else "of host RAM")
    print(f"replay: up to {config.replay.capacity:,} transitions x {per:,} bytes = {total / 1e9:.2f} GB {where}")
    if state and state.get("replay_note"):
        print(f"replay: {state['replay_note']}")


def make_logger(config: Config, run_dir: str, run_id: str | None = None) -> MetricsLogger:
    log = config.logger
    return MetricsLogger(run_dir, backends=list(log.backends), mode=log.mode, project=log.project,
                         group=log.group or sweep_group(), run_id=run_id,
                         config=OmegaConf.to_container(OmegaConf.structured(config)))


def sweep_group() -> str | None:
    """Jobs of one `-m` sweep share a wandb group named after the sweep dir (e.g. 2026-12-03_05-10-00)."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return sweep_group_name(hydra_cfg.sweep.dir)
