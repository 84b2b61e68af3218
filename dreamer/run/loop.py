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

import math
import time
from pathlib import Path

import numpy as np
from tqdm import tqdm

from collectors.episodes import SuccessRates
from dreamer.config import Config
from dreamer.io import scores
from dreamer.io.disk import DiskFullError, is_no_space
from dreamer.io.metrics import MetricsLogger, read_metrics
from dreamer.run.distributed import RankLostError
from dreamer.run.evaluator import Evaluator
from dreamer.run.progress import Progress, memory_mb
from dreamer.run.state import replay_bytes
from dreamer.run.stop import StopRequest
from dreamer.run.trainer import Trainer


class StopAgreed(KeyboardInterrupt):
    """A stop request seen by the ranks together (single process: this process's Ctrl-C/SIGTERM)."""


def train(config: Config, run_dir: str | Path, metrics: MetricsLogger | None = None,
          resume: dict | None = None, stop: StopRequest | None = None, world=None) -> Trainer:
    """Runs training to collector.total_frames. On a stop request (Ctrl-C/SIGTERM, see
    dreamer/run/stop.py) the collector's processes are stopped, a final checkpoint is written and
    KeyboardInterrupt propagates."""
    trainer = Trainer(config, run_dir, resume, world, run_id=metrics.run_id if metrics is not None else None)
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
        self.success = _success_rates(trainer)

    def run(self) -> None:
        t, total = self.t, self.cfg.collector.total_frames
        lag_allowed = max(1, int(self.cfg.collector.frames_per_batch / t.steps_per_update))
        main = t.world.is_main  # rank 0 alone shows progress, logs, evaluates and checkpoints
        progress = Progress(total, t.frames, t.updates, show=main)
        finished, first_update = False, True  # first in this process (a resumed run compiles again)
        failure = None
        try:
            t.collection.start(t.acting)
            while True:
                if t.agree(self.stop.requested):  # any rank's Ctrl-C/SIGTERM stops all, together
                    raise StopAgreed(self.stop.signal_name or "another rank stopped")
                t.collection.check()
                frames = t.frames
                if frames >= total:
                    t.collection.stop()
                target = t.target_updates(frames)
                if t.updates < target:
                    if target - t.updates > lag_allowed:
                        t.collection.hold(True)  # until caught up: pausing costs a worker round trip
                    if first_update:
                        # The first update: torch.compile / CUDA-graph capture, or cold eager caches.
                        # Collection paused: torchrl wants the replay writer quiescent for capture (a
                        # storage written during an interrupted compile was left broken), and the
                        # uniform-random prefill policy would otherwise race ~800 steps past the ratio
                        # meanwhile. Compiling takes minutes on a CPU: a stop request is honoured
                        # while it runs (on a helper thread).
                        flags = t.learner.flags
                        if main and (flags.compile or flags.regional or flags.cudagraph):
                            tqdm.write("learner: compiling the first update (minutes with a cold compile cache)")
                        with t.collection.paused():
                            progress.add_losses(self.stop.wait_for(lambda: t.update(push=False)))
                            t.push_if_due()  # collector calls stay on the main thread (watchdog)
                        first_update = False
                    else:
                        progress.add_losses(t.update())
                else:
                    t.collection.hold(False)
                    if frames >= total:
                        break
                    time.sleep(0.005)
                self.add_episodes(frames, progress)
                progress.show(frames, t.updates)
                self.periodic(frames, progress)
            finished = True
        except BaseException as err:
            failure = err
            raise
        finally:
            progress.close()
            t.step.close()
            rank_lost = isinstance(failure, RankLostError)
            t.collection.stop(kill=rank_lost)
            if not finished and self.evaluator is not None:
                self.evaluator.close()
            # Data-parallel ranks save together (each rank's replay files located) when they end
            # together: finished, or a stop they agreed on; after any other fault rank 0 alone.
            together = t.world.size > 1 and (failure is None or isinstance(failure, StopAgreed))
            if (main or together) and (t.updates > 0 or finished or t.frames > t.frames_at_start):
                self.final_checkpoint(failure, together)
            if isinstance(failure, StopAgreed):
                # Stopped together (Ctrl-C or SIGTERM on any rank): no rank exits before every rank has
                # stopped its collector and rank 0 has its checkpoint; torchrun SIGTERMs the process
                # groups of the others as soon as one rank exits non-zero.
                t.world.barrier()
        report_sync(t)
        if not main:
            return
        self.add_episodes(t.frames, progress)
        self.log(t.frames, progress)
        if self.cfg.eval.every and self.last_eval != t.frames:
            self.evaluate(t.frames)  # final evaluation, with the workers gone
        if self.evaluator is not None:
            self.evaluator.close()
        self.write_scores()

    def final_checkpoint(self, failure: BaseException | None, together: bool) -> None:
        """The checkpoint at the end, also after an error or a stop. If the disk is full, the error
        already in flight (or this one, after a clean end) says so; the save leaves no partial file."""
        try:
            path = self.t.save_checkpoint(together)
            if path is not None:
                tqdm.write(f"checkpoint: {path}")
        except DiskFullError as err:
            if failure is None:
                raise
            if not is_no_space(failure):
                tqdm.write(f"warning: no final checkpoint: {err}")

    def add_episodes(self, frames: int, progress: Progress) -> None:
        episodes, stats = self.t.tracker.pop_finished(), self.t.tracker.pop_stats()
        progress.add_episodes(episodes)
        if episodes and self.metrics is not None:
            self.metrics.log_episodes(frames, episodes, stats)
        if stats and self.success is not None:
            self.success.add([s["achievements"] for s in stats])
            if self.metrics is not None:
                self.metrics.log(frames, crafter_metrics(self.success))

    def write_scores(self) -> None:
        if self.metrics is not None:
            env = self.cfg.env
            scores.write_scores(self.t.run_dir, env.name, self.cfg.seed, env.action_repeat)

    def periodic(self, frames: int, progress: Progress) -> None:
        """Rank 0 logs and evaluates; every rank takes part in a checkpoint (its replay files)."""
        main = self.t.world.is_main
        if main and frames >= self.next_log:
            self.log(frames, progress)
            self.next_log = _next_multiple(frames, self.cfg.logger.every)
        if main and frames >= self.next_eval and self.t.updates > 0:
            with self.t.collection.paused():  # else collection races past the train ratio meanwhile
                self.evaluate(frames)
            self.next_eval = _next_multiple(frames, self.cfg.eval.every)
        if frames >= self.next_ckpt and self.t.updates > 0:
            with self.t.collection.paused():
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
        values.update({"replay/size": len(t.replay), "replay/bytes": replay_bytes(t.replay), "train/updates": t.updates,
                       "policy/lag_updates": t.updates - t.synced_at,
                       "time/elapsed_s": time.monotonic() - self.started, **memory_mb()})
        if self.cfg.env.nonfinite == "zero":
            values["collect/nonfinite_values"] = t.collection.records.nonfinite
        if self.metrics is not None:
            self.metrics.log(frames, values)

    def evaluate(self, frames: int) -> None:
        cfg = self.cfg
        if self.evaluator is None:
            self.evaluator = Evaluator(self.t.agent, cfg.env, cfg.world_model, seed=cfg.seed + 1_000_000,
                                       video=cfg.eval.video, stop=self.stop,
                                       sample_actions=cfg.eval.sample_actions,
                                       env_timeout_s=cfg.collector.env_timeout_s)
        self.last_eval = frames
        result = self.evaluator.run(cfg.eval.episodes, self.t.run_dir / "videos", tag=f"{frames:09d}")
        tqdm.write(f"eval at {frames} env steps: return {result.mean_return:.1f} over {len(result.returns)} episode(s)")
        if self.metrics is not None:
            self.metrics.log(frames, {"eval/return": result.mean_return,
                                      "eval/length": float(np.mean(result.lengths))})
            self.metrics.log_videos(frames, result.videos)
            self.write_scores()

def report_sync(trainer: Trainer) -> None:
    """Data-parallel: every rank holds bitwise the same weights (all ranks call this together)."""
    world = trainer.world
    if world.size > 1:
        same = world.in_sync(trainer.agent.loss)
        if world.is_main:
            tqdm.write(f"ranks: {world.size}, weights and statistics identical: {'yes' if same else 'NO'}")
        if not same:
            raise RuntimeError("the ranks' weights differ: data-parallel updates went out of step")


def _success_rates(trainer: Trainer) -> SuccessRates | None:
    """Crafter's achievement success rates over the run's training episodes (episodes.jsonl
    holds each episode's achievements, so a resumed run continues the rates)."""
    if "achievements" not in trainer.spec.stats:
        return None
    from collectors.envs.crafter import achievement_names

    success = SuccessRates(achievement_names())
    path = trainer.run_dir / "episodes.jsonl"
    if path.exists():
        success.add([row["achievements"] for row in read_metrics(path) if "achievements" in row])
    return success


def crafter_metrics(success: SuccessRates) -> dict[str, float]:
    from collectors.envs.crafter import crafter_score

    rates = success.rates()
    return {**{f"crafter/success/{k}": v for k, v in rates.items()},
            "crafter/score": crafter_score(list(rates.values())), "crafter/episodes": success.episodes}


def _next_multiple(value: int, every: int) -> int:
    return (value // every + 1) * every
