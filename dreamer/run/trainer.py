"""The trainer: the run's parts, one rank's (agent, learner, replay, episode tracker, and the
collection and update parts: dreamer/run/collection.py, dreamer/run/updates.py), the train-ratio arithmetic
over all ranks, and the state a checkpoint holds (plain types only: dreamer/run/state.py,
dreamer/io/checkpoint.py). The loop that drives it is dreamer/run/loop.py.
"""
from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import OmegaConf

from collectors.episodes import EpisodeTracker
from collectors.specs import env_spec
from dreamer.agent.learner import Learner
from dreamer.agent.model import build_agent
from dreamer.agent.obs import ObsSpec
from dreamer.agent.policy import build_acting_policy
from dreamer.config import Config
from dreamer.config.placement import resolve_device
from dreamer.config.replay_plan import replay_dir
from dreamer.io import checkpoint
from dreamer.run.collection import Collection
from dreamer.run.distributed import SingleProcess, rank_share
from dreamer.run.state import replay_state, restore_replay, rng_state, set_rng_state
from dreamer.run.updates import UpdateStep
from patches import mkl_amd
from patches.regional import compile_cache_dir
from replay.buffer import SequenceReplay
from replay.records import ContextSpec

# What Trainer.state_dict writes: a checkpoint without these is not one of ours.
STATE_KEYS = ("loss", "optimizer", "frames", "updates", "rng", "run_id", "replay", "config")


class Trainer:
    def __init__(self, config: Config, run_dir: str | Path, resume: dict | None = None, world=None,
                 run_id: str | None = None):
        # config: the run's totals (train ratio, budgets, intervals count env steps over all ranks);
        # share: this rank's envs, collector batch, replay batch and capacity (dreamer/run/distributed.py)
        self.world = world or SingleProcess()
        self.config, self.run_dir = config, Path(run_dir)
        self.share = rank_share(config, self.world.size)
        rep, wm = config.replay, config.world_model
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        device = resolve_device(config.learner.device, self.world.local_rank if self.world.size > 1 else None)
        if device == "cpu" and config.learner.threads != "auto":
            torch.set_num_threads(config.learner.threads)
        self.spec = env_spec(config.env)
        self.obs = ObsSpec.from_spec(self.spec)
        self.agent = build_agent(wm, config.learner, self.obs, self.spec.action_dim, device,
                                 discrete=self.spec.discrete)
        if self.world.size > 1:
            self.world.broadcast_module(self.agent.loss)
            self.agent.optimizer.grad_sync = self.world.average_gradients
            torch.manual_seed(config.seed + 7919 * self.world.rank)  # each rank's own imagination noise
        self.context = ContextSpec(wm.stoch, wm.classes, wm.deter) if rep.context else None
        self.steps_per_update = rep.batch_size * rep.batch_length / config.learner.train_ratio
        expected = max(0, config.collector.total_frames - config.learner.prefill_frames) / self.steps_per_update
        self.learner = Learner(self.agent, config.learner, self.context, expected_updates=expected)
        if self.world.is_main:
            self._describe_learner(device, expected)
        self.acting = build_acting_policy(self.agent.nets)  # weight source for the inference server
        # batch_length + 1 records: the first is context (its latent starts the sequence), the
        # others are the trained steps (dreamer/agent/learner.py).
        share = self.share.replay
        self.replay = SequenceReplay(self.share.collector.num_envs, share.capacity, share.batch_size,
                                     rep.batch_length + 1, directory=self.replay_dir(resume))
        self.tracker = EpisodeTracker(stats=self.spec.stats)
        self.collection = Collection(config, self.share, self.world, self.run_dir, self.spec, self.obs,
                                     self.spec.action_dim, self.context, self.replay, self.tracker,
                                     frames=lambda: self.frames)
        self.step = UpdateStep(self.agent, self.learner, self.replay, self.world, rep.prefetch,
                               config.learner.max_nonfinite_updates)
        self.frames_at_start = 0
        self.synced_at = 0  # learner updates at the last weight push
        self.run_id = None
        self.refill: tuple[int, int] | None = None  # (env steps, updates) of a resume without replay
        self._agreed_frames = 0  # this run's env steps over all ranks, as of the last agree()
        self._all_can_sample = False
        if resume is not None:
            self.load_state_dict(resume)
        if run_id is not None:  # the logger's run (a resumed wandb run keeps its id)
            self.run_id = run_id

    def _describe_learner(self, device: str, expected: float) -> None:
        flags = self.learner.flags
        cache = f" (compile cache: {compile_cache_dir()})" if flags.compile or flags.regional else ""
        threads = f", {torch.get_num_threads()} thread(s)" if device == "cpu" else ""
        print(f"learner: {flags.describe()}{threads}, ~{expected:,.0f} updates planned{cache}", flush=True)
        if mkl_amd.STATUS:  # an AMD CPU with AVX-512: whether MKL runs its AVX-512 kernels
            print(mkl_amd.STATUS, flush=True)

    def replay_dir(self, resume: dict | None) -> Path | None:
        """None (replay in RAM), the checkpoint's replay files, or this run's (one dir per rank)."""
        if resume is not None and resume.get("replay_dir") is not None:
            return Path(resume["replay_dir"])
        if self.config.replay.storage != "disk":
            return None
        directory = replay_dir(self.config, self.run_dir)
        return directory / f"rank{self.world.rank}" if self.world.size > 1 else directory

    # -- counters ---------------------------------------------------------------------------
    @property
    def frames(self) -> int:
        """Env steps of the run (over all ranks: as the ranks last agreed)."""
        if self.world.size == 1:
            return self.frames_at_start + self.tracker.frames
        return self.frames_at_start + self._agreed_frames

    def agree(self, stop_requested: bool) -> bool:
        """Once per loop iteration: the ranks' env steps summed and any rank's stop request shared, so
        every rank takes the same decisions (updates are collective). Returns whether to stop."""
        if self.world.size == 1:
            return stop_requested
        self._agreed_frames, stop, self._all_can_sample = self.world.agree(
            self.tracker.frames, stop_requested, self.replay.can_sample())
        return stop

    def can_sample(self) -> bool:
        """This rank's replay can sample; data-parallel: every rank's could, at the last agree()."""
        return self.replay.can_sample() if self.world.size == 1 else self._all_can_sample

    @property
    def updates(self) -> int:
        return self.learner.updates

    def target_updates(self, frames: int) -> int:
        """Updates the train ratio allows after `frames` env steps (0 before prefill ends)."""
        prefill = self.config.learner.prefill_frames
        if self.refill is not None:  # resumed without replay: refill learner.prefill_frames first
            start, base = self.refill
            if frames < start + prefill or not self.can_sample():
                return base
            return base + 1 + int((frames - start - prefill) / self.steps_per_update)
        if frames < prefill or not self.can_sample():
            return 0
        return 1 + int((frames - prefill) / self.steps_per_update)

    # -- learning ---------------------------------------------------------------------------
    def update(self, push: bool = True) -> dict:
        """One learner update (dreamer/run/updates.py); `push`: new weights to the inference server
        when collector.policy_sync_every updates have passed since the last push."""
        metrics = self.step()
        if push:
            self.push_if_due()
        return metrics

    def push_if_due(self) -> None:
        every = self.config.collector.policy_sync_every
        if self.updates == 1 or self.updates - self.synced_at >= every:
            self.collection.push_weights(self.acting)
            self.synced_at = self.updates

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self, together: bool = True) -> dict | None:
        """The checkpoint's contents; data-parallel: every rank calls this together (each rank's
        replay files located), and ranks other than 0 get None (dreamer/run/state.py)."""
        replay = replay_state(self.replay, self.config.checkpoint, self.world, self.run_dir, together)
        if replay is None:
            return None
        return {
            "loss": self.agent.loss.state_dict(),
            "optimizer": self.agent.optimizer.state_dict(),
            "frames": self.frames,
            "updates": self.updates,
            "rng": rng_state(),
            "run_id": self.run_id,
            **replay,
            "world_size": self.world.size,
            "config": OmegaConf.to_container(OmegaConf.structured(self.config)),
        }

    def load_state_dict(self, state: dict) -> None:
        self.agent.loss.load_state_dict(state["loss"])
        self.agent.optimizer.load_state_dict(state["optimizer"])
        self.learner.updates = self.synced_at = state["updates"]
        self.frames_at_start = state["frames"]
        self.run_id = state["run_id"]
        if state["replay"] is None and state.get("replay_disk") is None and state["frames"] > 0:
            # without the replay, a burst of catch-up updates on the first few new sequences would
            # overfit them: collect a fresh prefill first
            self.refill = (state["frames"], state["updates"])
        late = restore_replay(self.replay, state)
        if late and self.world.is_main:
            print(f"replay: {late} records written after the checkpoint are ignored", flush=True)
        set_rng_state(state["rng"])
        if self.world.size > 1:  # rank 0's RNG state was saved: each rank draws its own noise again
            torch.manual_seed(self.config.seed + 7919 * self.world.rank + state["updates"])

    def save_checkpoint(self, together: bool = True) -> Path | None:
        """Rank 0 writes the checkpoint (returns its path; None on the other ranks). Data-parallel,
        every rank calls this together; `together=False`: an exit where another rank may be gone
        (rank 0 alone, without replay)."""
        with self.step.sampling_paused():  # no sample moves the RNG or reads replay meanwhile
            state = self.state_dict(together)
        if state is None:
            return None
        return checkpoint.save(self.run_dir / "checkpoints", self.frames, state, self.config.checkpoint.keep)
