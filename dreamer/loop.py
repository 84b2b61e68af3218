"""The training loop: prefill, background collection, the learner at the train ratio, progress,
metrics, evaluation, checkpoints and resume.

The collector writes into replay from its own thread (workers and the inference server are
processes). The main thread runs the learner so that replayed steps per env step stay at
`learner.train_ratio` (DreamerV3's meaning: updates = env_steps x ratio / (batch_size x batch_length)):
  * learner behind by more than one collector batch -> collection pauses until it has caught up;
  * learner ahead (nothing to do) -> it waits for env steps.
Weights reach the inference server every `collector.policy_sync_every` updates. During prefill
the served policy acts uniformly at random; the first weight push switches that off.
"""
from __future__ import annotations

import contextlib
import logging
import math
import random
import resource
import time
from pathlib import Path

import numpy as np
import psutil
import torch
from omegaconf import OmegaConf
from tqdm import tqdm

from collectors.collector import build_collector
from collectors.envs import action_dim, env_factory, observation_dim
from collectors.episodes import EpisodeTracker
from collectors.replay import SequenceReplay
from collectors.watchdog import ProcessWatchdog
from dreamer import checkpoint, scores
from dreamer.agent import ObsSpec, build_agent
from dreamer.config import Config
from dreamer.evaluate import Evaluator
from dreamer.learner import Learner
from dreamer.metrics import MetricsLogger
from dreamer.policy import CARRY_KEYS, DreamerPolicyFactory, build_acting_policy, primer_factory
from dreamer.stop import StopRequest, children_ignore_ctrl_c

log = logging.getLogger(__name__)


def resolve_device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


class NonFiniteLossError(RuntimeError):
    pass


class Trainer:
    def __init__(self, config: Config, run_dir: str | Path, resume: dict | None = None):
        self.config, self.run_dir = config, Path(run_dir)
        env_cfg, rep = config.env, config.replay
        torch.manual_seed(config.seed)
        self.obs = ObsSpec.from_env(env_cfg.obs, env_cfg.image_size,
                                    vector_dim=observation_dim(env_cfg.domain, env_cfg.task))
        self.action_dim = action_dim(env_cfg.domain, env_cfg.task)
        self.agent = build_agent(config.world_model, config.learner, self.obs, self.action_dim,
                                 resolve_device(config.learner.device),
                                 lr_warmup_steps=config.learner.lr_warmup_steps)
        self.learner = Learner(self.agent, config.learner)
        self.acting = build_acting_policy(self.agent.nets)  # weight source for the inference server
        self.replay = SequenceReplay(config.collector.num_envs, rep.capacity, rep.batch_size, rep.batch_length)
        self.tracker = EpisodeTracker()
        self.frames_at_start = 0
        self.nonfinite_in_row = 0
        self.synced_at = 0  # learner updates at the last weight push
        self.run_id = None
        if resume is not None:
            self.load_state_dict(resume)
        self.steps_per_update = rep.batch_size * rep.batch_length / config.learner.train_ratio
        self.collector = None
        self.watchdog = None
        self.collector_stopped = False
        self._paused = None

    # -- counters ---------------------------------------------------------------------------
    @property
    def frames(self) -> int:
        return self.frames_at_start + self.tracker.frames

    @property
    def updates(self) -> int:
        return self.learner.updates

    def target_updates(self, frames: int) -> int:
        """Updates the train ratio allows after `frames` env steps (0 before prefill ends)."""
        prefill = self.config.learner.prefill_frames
        if frames < prefill or not self.replay.can_sample():
            return 0
        return 1 + int((frames - prefill) / self.steps_per_update)

    # -- collection -------------------------------------------------------------------------
    def start_collector(self) -> None:
        cfg, col = self.config, self.config.collector
        primer = primer_factory(cfg.world_model, self.action_dim)
        weights = {k: v.detach().cpu() for k, v in self.acting.state_dict().items()}
        prefilling = self.frames < cfg.learner.prefill_frames
        factory = DreamerPolicyFactory(cfg.world_model, self.obs, self.action_dim, explore=True,
                                       device=resolve_device(col.device), state_dict=weights,
                                       random_actions=prefilling)
        # Replay keeps obs at t and the action; the learner takes obs[t+1] from the next record.
        drop = tuple(("next", k) for k in self.obs.keys) + CARRY_KEYS + tuple(("next", k) for k in CARRY_KEYS)
        self.collector = build_collector(
            [env_factory(cfg.env, seed=cfg.seed * 10_000 + i + self.frames, extra_transform=primer)
             for i in range(col.num_envs)],
            factory,
            frames_per_batch=col.frames_per_batch,
            total_frames=col.total_frames - self.frames,
            chunk_size=col.chunk_size(),
            transport=col.transport,
            static_batch_size=col.inference_static_batch_size,
            policy_device=resolve_device(col.device),
            replay=self.replay,
            drop_keys=drop,
            on_write=self.tracker,
        )
        before = {p.pid for p in psutil.Process().children()}
        with children_ignore_ctrl_c():  # the server and workers start here
            self.collector.start()
        started = [p.pid for p in psutil.Process().children() if p.pid not in before
                   and "resource_tracker" not in " ".join(_cmdline(p))]
        self.watchdog = ProcessWatchdog(started).start()

    def hold_collection(self, hold: bool) -> None:
        """Pause (True) or resume (False) the collector; idempotent."""
        if hold and self._paused is None and self.frames < self.config.collector.total_frames:
            stack = contextlib.ExitStack()
            with self.watchdog.guard():
                stack.enter_context(self.collector.pause(timeout=60))
            self._paused = stack
        elif not hold and self._paused is not None:
            paused, self._paused = self._paused, None
            with self.watchdog.guard():
                paused.close()

    @contextlib.contextmanager
    def collection_paused(self):
        """Collection paused inside (as it was, after): for evaluation and checkpoints."""
        held = self._paused is not None
        self.hold_collection(True)
        try:
            yield
        finally:
            if not held:
                self.hold_collection(False)

    def check_collector(self) -> None:
        self.watchdog.check()
        thread = getattr(self.collector, "_replay_thread", None)
        if thread is not None and not thread.is_alive() and self.frames < self.config.collector.total_frames:
            self.collector.async_shutdown()  # re-raises the writer thread's error
            raise RuntimeError("collection stopped before collector.total_frames")

    def stop_collector(self) -> None:
        """Stop workers and server (idempotent): once the budget is met they only cost CPU."""
        if self.collector is None or self.collector_stopped:
            return
        self.collector_stopped = True
        if self.watchdog.fault is not None:  # a process died: shutdown() could block on its locks
            self.watchdog.kill_all()
            return
        self.watchdog.stop()
        if self._paused is not None:
            paused, self._paused = self._paused, None
            paused.close()
        self.collector.shutdown(raise_on_error=False)

    def push_weights(self) -> None:
        if not self.collector_stopped:
            with self.watchdog.guard():
                self.collector.update_policy_weights_(self.acting)
        self.synced_at = self.updates

    # -- learning ---------------------------------------------------------------------------
    def update(self) -> dict[str, float]:
        """One learner update. Non-finite gradients: the optimizer skips the step (weights stay as
        they were), the update still counts toward the train ratio, and after
        learner.max_nonfinite_updates of them in a row the run stops (a checkpoint is written)."""
        metrics = self.learner.step(self.replay.sample())
        skipped = self.agent.optimizer.last_step_skipped or not all(math.isfinite(v) for v in metrics.values())
        self.nonfinite_in_row = self.nonfinite_in_row + 1 if skipped else 0
        metrics = {k: v for k, v in metrics.items() if math.isfinite(v)}  # keep NaNs out of the averages
        metrics["skipped_updates"] = float(self.agent.optimizer.skipped)
        limit = self.config.learner.max_nonfinite_updates
        if self.nonfinite_in_row >= limit:
            raise NonFiniteLossError(f"{limit} updates in a row had non-finite losses or gradients "
                                     "(learner.max_nonfinite_updates); the weights are those before them")
        every = self.config.collector.policy_sync_every
        if self.updates == 1 or self.updates - self.synced_at >= every:
            self.push_weights()
        return metrics

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self, with_replay: bool) -> dict:
        return {
            "loss": self.agent.loss.state_dict(),
            "optimizer": self.agent.optimizer.state_dict(),
            "frames": self.frames,
            "updates": self.updates,
            "rng": rng_state(),
            "run_id": self.run_id,
            "replay": [self.replay.stream(e) for e in range(self.replay.num_envs)] if with_replay else None,
            "config": OmegaConf.to_container(OmegaConf.structured(self.config)),
        }

    def load_state_dict(self, state: dict) -> None:
        self.agent.loss.load_state_dict(state["loss"])
        self.agent.optimizer.load_state_dict(state["optimizer"])
        self.learner.updates = self.synced_at = state["updates"]
        self.frames_at_start = state["frames"]
        self.run_id = state["run_id"]
        if state["replay"] is not None:
            for env, stream in enumerate(state["replay"]):
                if stream is not None:
                    self.replay.member(env).extend(stream)
        set_rng_state(state["rng"])

    def save_checkpoint(self) -> Path:
        cfg = self.config.checkpoint
        replay_gib = self.replay_bytes() / 2**30 if cfg.replay else 0.0
        with_replay = cfg.replay and replay_gib <= cfg.replay_max_gb
        if cfg.replay and not with_replay:
            log.warning("replay (%.1f GiB) exceeds checkpoint.replay_max_gb; checkpoint holds no replay", replay_gib)
        return checkpoint.save(self.run_dir / "checkpoints", self.frames, self.state_dict(with_replay), cfg.keep)

    def replay_bytes(self) -> int:
        total = 0
        for env in range(self.replay.num_envs):
            member = self.replay.member(env)
            if len(member):
                total += member.storage[:1].bytes() * len(member)
        return total


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Progress:
    """Progress bar plus the windowed rates and averages the logger needs."""

    def __init__(self, total: int, initial: int, updates: int):
        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True,
                        smoothing=0.1, mininterval=1.0)
        self.shown = initial
        self.window_start = (time.monotonic(), initial, updates)
        self.losses: dict[str, list[float]] = {}
        self.episodes: list[tuple[float, int]] = []
        self.last_return: float | None = None

    def add_losses(self, metrics: dict[str, float]) -> None:
        for k, v in metrics.items():
            self.losses.setdefault(k, []).append(v)

    def add_episodes(self, episodes: list[tuple[float, int]]) -> None:
        self.episodes += episodes
        if episodes:
            self.last_return = episodes[-1][0]

    def show(self, frames: int, updates: int) -> None:
        self.bar.update(frames - self.shown)
        self.shown = frames
        elapsed = max(time.monotonic() - self.window_start[0], 1e-9)
        post = {"upd": updates, "upd/s": f"{(updates - self.window_start[2]) / elapsed:.2f}"}
        if self.last_return is not None:
            post["return"] = f"{self.last_return:.1f}"
        self.bar.set_postfix(post, refresh=False)

    def window(self, frames: int, updates: int) -> dict[str, float]:
        """Rates and means since the last call; starts a new window."""
        now = time.monotonic()
        t0, f0, u0 = self.window_start
        elapsed = max(now - t0, 1e-9)
        out = {"collect/env_steps_per_s": (frames - f0) / elapsed, "train/updates_per_s": (updates - u0) / elapsed}
        out.update({f"train/{k}": float(np.mean(v)) for k, v in self.losses.items()})
        if self.episodes:
            out["episode/return"] = float(np.mean([r for r, _ in self.episodes]))
            out["episode/length"] = float(np.mean([n for _, n in self.episodes]))
            out["episode/count"] = len(self.episodes)
        self.window_start, self.losses, self.episodes = (now, frames, updates), {}, []
        return out

    def close(self) -> None:
        self.bar.close()


def train(config: Config, run_dir: str | Path, metrics: MetricsLogger | None = None,
          resume: dict | None = None, stop: StopRequest | None = None) -> Trainer:
    """Runs training to collector.total_frames. On a stop request (Ctrl-C/SIGTERM, see
    dreamer/stop.py) the collector's processes are stopped, a final checkpoint is written and
    KeyboardInterrupt propagates."""
    trainer = Trainer(config, run_dir, resume)
    if metrics is not None and metrics.run_id is not None:
        trainer.run_id = metrics.run_id
    if trainer.frames >= config.collector.total_frames:
        print(f"nothing to do: the checkpoint is at {trainer.frames} env steps >= collector.total_frames")
        return trainer
    _Loop(trainer, metrics, stop or StopRequest()).run()
    return trainer


class _Loop:
    def __init__(self, trainer: Trainer, metrics: MetricsLogger | None, stop: StopRequest):
        self.t, self.metrics, self.cfg, self.stop = trainer, metrics, trainer.config, stop
        frames = trainer.frames
        self.next_log = _next_multiple(frames, self.cfg.logger.every)
        self.next_eval = _next_multiple(frames, self.cfg.eval.every) if self.cfg.eval.every else math.inf
        self.next_ckpt = _next_multiple(frames, self.cfg.checkpoint.every) if self.cfg.checkpoint.every else math.inf
        self.evaluator = None
        self.last_eval = None
        self.writer_cpu = (trainer.tracker.writer_cpu, frames)
        self.started = time.monotonic()

    def run(self) -> None:
        t, total = self.t, self.cfg.collector.total_frames
        lag_allowed = max(1, int(self.cfg.collector.frames_per_batch / t.steps_per_update))
        progress = Progress(total, t.frames, t.updates)
        finished, first_update = False, True  # first in this process (a resumed run compiles again)
        try:
            t.start_collector()
            while True:
                self.stop.check()
                t.check_collector()
                frames = t.frames
                if frames >= total:
                    t.stop_collector()
                target = t.target_updates(frames)
                if t.updates < target:
                    if target - t.updates > lag_allowed:
                        t.hold_collection(True)  # until caught up: pausing costs a worker round trip
                    if first_update:
                        # The first update: torch.compile / CUDA-graph capture, or cold eager caches.
                        # Collection paused: torchrl wants the replay writer quiescent for capture (a
                        # storage written during an interrupted compile was left broken), and the
                        # uniform-random prefill policy would otherwise race ~800 steps past the ratio
                        # meanwhile. Compiling takes minutes on a CPU: a stop signal raises at once.
                        with t.collection_paused(), self.stop.immediate():
                            progress.add_losses(t.update())
                        first_update = False
                    else:
                        progress.add_losses(t.update())
                else:
                    t.hold_collection(False)
                    if frames >= total:
                        break
                    time.sleep(0.005)
                self.add_episodes(frames, progress)
                progress.show(frames, t.updates)
                self.periodic(frames, progress)
            finished = True
        finally:
            progress.close()
            t.stop_collector()
            if not finished and self.evaluator is not None:
                self.evaluator.close()
            if t.updates > 0 or finished or t.frames > t.frames_at_start:
                tqdm.write(f"checkpoint: {t.save_checkpoint()}")
        self.add_episodes(t.frames, progress)
        self.log(t.frames, progress)
        if self.cfg.eval.every and self.last_eval != t.frames:
            self.evaluate(t.frames)  # final evaluation, with the workers gone
        if self.evaluator is not None:
            self.evaluator.close()
        self.write_scores()

    def add_episodes(self, frames: int, progress: Progress) -> None:
        episodes = self.t.tracker.pop_finished()
        progress.add_episodes(episodes)
        if episodes and self.metrics is not None:
            self.metrics.log_episodes(frames, episodes)

    def write_scores(self) -> None:
        if self.metrics is not None:
            env = self.cfg.env
            scores.write_scores(self.t.run_dir, env.name, self.cfg.seed, env.action_repeat)

    def periodic(self, frames: int, progress: Progress) -> None:
        if frames >= self.next_log:
            self.log(frames, progress)
            self.next_log = _next_multiple(frames, self.cfg.logger.every)
        if frames >= self.next_eval and self.t.updates > 0:
            with self.t.collection_paused():  # else collection races past the train ratio meanwhile
                self.evaluate(frames)
            self.next_eval = _next_multiple(frames, self.cfg.eval.every)
        if frames >= self.next_ckpt and self.t.updates > 0:
            with self.t.collection_paused():
                self.t.save_checkpoint()
            self.next_ckpt = _next_multiple(frames, self.cfg.checkpoint.every)

    def log(self, frames: int, progress: Progress) -> None:
        t = self.t
        values = progress.window(frames, t.updates)
        cpu, f0 = self.writer_cpu
        now_cpu = t.tracker.writer_cpu
        if frames > f0:
            values["collect/driver_cpu_ms_per_step"] = 1000 * (now_cpu - cpu) / (frames - f0)
        self.writer_cpu = (now_cpu, frames)
        values.update({"replay/size": len(t.replay), "replay/bytes": t.replay_bytes(), "train/updates": t.updates,
                       "policy/lag_updates": t.updates - t.synced_at,
                       "time/elapsed_s": time.monotonic() - self.started, **memory_mb()})
        if self.metrics is not None:
            self.metrics.log(frames, values)

    def evaluate(self, frames: int) -> None:
        cfg = self.cfg
        if self.evaluator is None:
            self.evaluator = Evaluator(self.t.agent, cfg.env, cfg.world_model, seed=cfg.seed + 1_000_000,
                                       video=cfg.eval.video, stop=self.stop)
        self.last_eval = frames
        result = self.evaluator.run(cfg.eval.episodes, self.t.run_dir / "videos", tag=f"{frames:09d}")
        tqdm.write(f"eval at {frames} env steps: return {result.mean_return:.1f} over {len(result.returns)} episode(s)")
        if self.metrics is not None:
            self.metrics.log(frames, {"eval/return": result.mean_return,
                                      "eval/length": float(np.mean(result.lengths))})
            self.metrics.log_videos(frames, result.videos)
            self.write_scores()


def _cmdline(proc: psutil.Process) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def memory_mb() -> dict[str, float]:
    """Resident memory: this process's peak, and the whole process tree now (driver, env workers,
    inference server, wandb's service)."""
    driver = psutil.Process()
    tree = [driver] + driver.children(recursive=True)
    rss = 0
    for proc in tree:
        with contextlib.suppress(psutil.Error):  # a child may exit between listing and reading
            rss += proc.memory_info().rss
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # kB on Linux
    return {"system/driver_peak_rss_mb": peak_kb / 1024, "system/tree_rss_mb": rss / 2**20}


def _next_multiple(value: int, every: int) -> int:
    return (value // every + 1) * every
