"""Collection control, one rank's: the collector's processes (env workers and the inference server)
started for this rank's share of the budget, paused while the learner catches up or while an
evaluation or a checkpoint is taken, checked for faults once per loop iteration, sent new weights,
and stopped with nothing left behind. The Trainer (dreamer/run/trainer.py) owns one."""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import psutil
import torch

from collectors.collector import build_collector
from collectors.envs import env_factory
from collectors.envs.guard import fault_line
from collectors.watchdog import ProcessWatchdog, _cmdline
from dreamer.agent.policy import DreamerPolicyFactory, primer_factory
from dreamer.config import Config, placement
from dreamer.config.placement import resolve_device
from patches.collector import replay_error, replay_thread
from patches.spawn import children_ignore_stop_signals
from replay.records import ReplayRecords


class Collection:
    """`config`: the run's totals; `share`: this rank's part (dreamer/run/distributed.py); `frames`: the
    run's env steps so far (over all ranks); the replay and episode tracker the chunks go into."""

    def __init__(self, config: Config, share: Config, world, run_dir: Path, spec, obs, action_dim: int, context,
                 replay, tracker, frames: Callable[[], int]):
        self.config, self.share, self.world, self.run_dir = config, share, world, run_dir
        self.spec, self.obs, self.action_dim, self.context = spec, obs, action_dim, context
        self.replay, self.tracker, self.frames = replay, tracker, frames
        self.local_rank = world.local_rank if world.size > 1 else None
        self.collector = None
        self.watchdog = None
        self.records = None
        self.stopped = False
        self.budget = 0  # env steps this rank's collector takes (tracker count), set at start
        self._paused = None

    def start(self, acting: torch.nn.Module) -> None:
        cfg, col = self.config, self.share.collector
        weights = {k: v.detach().cpu() for k, v in acting.state_dict().items()}
        device = resolve_device(col.device, self.local_rank)
        factory = DreamerPolicyFactory(cfg.world_model, self.obs, self.action_dim, discrete=self.spec.discrete,
                                       explore=True, device=device, state_dict=weights,
                                       random_actions=self.frames() < cfg.learner.prefill_frames)
        first = self.world.rank * col.num_envs  # this rank's envs: global indices first.. (own seeds)
        remaining = cfg.collector.total_frames - self.frames()
        self.budget = self.tracker.frames + -(-remaining // self.world.size)  # this rank's
        self.records = ReplayRecords(self.obs.keys, self.context, stats=self.spec.stats)
        self.heartbeat_dir = tempfile.mkdtemp(prefix="dreamer-heartbeats-")  # removed in stop()
        heartbeats = [(os.path.join(self.heartbeat_dir, str(first + i)), f"env worker {first + i} ({cfg.env.name})")
                      for i in range(col.num_envs)]
        self.collector = build_collector(
            [self._env(first + i, heartbeats[i][0]) for i in range(col.num_envs)],
            factory,
            frames_per_batch=col.frames_per_batch,
            total_frames=self.budget - self.tracker.frames,
            chunk_size=col.chunk_size(),
            transport=col.transport,
            static_batch_size=col.inference_static_batch_size,
            policy_device=device,
            replay=self.replay,
            records=self.records,
            on_write=self.tracker,
        )
        before = {p.pid for p in psutil.Process().children()}
        with children_ignore_stop_signals():  # the server and workers start here
            self.collector.start()
        replay_thread(self.collector), replay_error(self.collector)  # read later: fail now if torchrl lacks them
        started = [p.pid for p in psutil.Process().children() if p.pid not in before
                   and "resource_tracker" not in " ".join(_cmdline(p))]
        self.watchdog = ProcessWatchdog(started, heartbeats=heartbeats, env_timeout_s=col.env_timeout_s,
                                        cause=self.env_fault).start()

    def _env(self, index: int, heartbeat: str):
        cfg = self.config
        primer = primer_factory(cfg.world_model, self.action_dim)
        render = placement.render_device(index, cfg.env.render_devices, torch.cuda.device_count(), self.local_rank)
        return env_factory(cfg.env, seed=cfg.seed * 10_000 + index + self.frames(), extra_transform=primer,
                           worker=index, heartbeat=heartbeat, error_log=str(self.run_dir / "train.log"),
                           render_device=render)

    def hold(self, hold: bool) -> None:
        """Pause (True) or resume (False) the collector; idempotent. A no-op once it is stopped."""
        if self.stopped:  # (killed: pausing or resuming its dead processes would fail)
            self._paused = None
            return
        if hold and self._paused is None and self.frames() < self.config.collector.total_frames:
            stack = contextlib.ExitStack()
            with self.watchdog.guard():
                stack.enter_context(self.collector.pause(timeout=self.pause_timeout_s()))
            self._paused = stack
        elif not hold and self._paused is not None:
            paused, self._paused = self._paused, None
            with self.watchdog.guard():
                paused.close()

    def pause_timeout_s(self) -> float | None:
        """Longer than collector.env_timeout_s: a stuck env is the watchdog's to name, not the pause's."""
        limit = self.config.collector.env_timeout_s
        return None if limit is None else max(60.0, limit + 30.0)

    @contextlib.contextmanager
    def paused(self):
        """Collection paused inside (as it was, after): for evaluation and checkpoints."""
        held = self._paused is not None
        self.hold(True)
        try:
            yield
        finally:
            if not held:
                self.hold(False)

    def env_fault(self) -> str | None:
        """An env's fault that stopped torchrl's replay writer (it then ends the workers itself)."""
        error = replay_error(self.collector)
        return None if error is None else fault_line(error)

    def check(self) -> None:
        """Raises the fault of a worker, the server (the watchdog) or torchrl's replay writer thread."""
        self.watchdog.check()
        thread = replay_thread(self.collector)
        if thread is not None and not thread.is_alive() and self.tracker.frames < self.budget:
            self.collector.async_shutdown()  # re-raises the writer thread's error
            raise RuntimeError("collection stopped before collector.total_frames")

    def stop(self, kill: bool = False) -> None:
        """Stop workers and server (idempotent): once the budget is met they only cost CPU. `kill`:
        end them at once, without the orderly shutdown (which waits on their shared locks)."""
        if self.collector is None or self.stopped:
            return
        self.stopped = True
        shutil.rmtree(self.heartbeat_dir, ignore_errors=True)
        # kill: another rank is gone and torchrun is about to SIGTERM this rank's process group, so
        # a worker may die holding a lock the orderly shutdown then waits on forever (seen).
        if kill or self.watchdog.fault is not None:  # a process died: shutdown() could block on its locks
            self.watchdog.kill_all()
            return
        self.watchdog.stop()
        if self._paused is not None:
            paused, self._paused = self._paused, None
            paused.close()
        self.collector.shutdown(raise_on_error=False)
        self.watchdog.kill_all()  # any left (they ignore SIGTERM, so torchrl's terminate() cannot end them)

    def push_weights(self, acting: torch.nn.Module) -> None:
        """The acting policy's new weights to the inference server (a no-op once stopped)."""
        if not self.stopped:
            with self.watchdog.guard():
                self.collector.update_policy_weights_(acting)
