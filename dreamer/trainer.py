"""The trainer: the run's parts (agent, learner, replay, collector and its watchdog), the train-ratio
arithmetic, one learner update, and the state a checkpoint holds (plain types only: see
dreamer/checkpoint.py). The loop that drives it is dreamer/loop.py.
"""
from __future__ import annotations

import contextlib
import os
import logging
import shutil
import tempfile
import time
from pathlib import Path

import psutil
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict, TensorDictBase

from collectors.collector import build_collector
from collectors.prefetch import Prefetcher
from collectors.envs import env_factory
from collectors.episodes import EpisodeTracker
from collectors.records import CONTEXT, ContextSpec, ReplayRecords
from collectors import replay_disk
from collectors.replay import SequenceReplay
from collectors.specs import env_spec
from collectors.watchdog import ProcessWatchdog, _cmdline
from dreamer import checkpoint, mkl_amd, placement
from dreamer.agent import ObsSpec, build_agent
from dreamer.config import Config
from dreamer.distributed import SingleProcess, rank_share
from dreamer.learner import Learner
from dreamer.policy import DreamerPolicyFactory, build_acting_policy, primer_factory
from dreamer.replay_plan import replay_dir
from dreamer.run_state import plain_stream, rng_state, set_rng_state
from dreamer.regional import compile_cache_dir
from dreamer.stop import children_ignore_stop_signals

log = logging.getLogger(__name__)

# What Trainer.state_dict writes: a checkpoint without these is not one of ours.
STATE_KEYS = ("loss", "optimizer", "frames", "updates", "rng", "run_id", "replay", "config")


def resolve_device(name: str, local_rank: int | None = None) -> str:
    """auto -> cuda if available else cpu; a plain `cuda` of a data-parallel rank -> cuda:<local rank>."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and local_rank is not None:
        return f"cuda:{local_rank}"
    return name


class NonFiniteLossError(RuntimeError):
    pass


class Trainer:
    def __init__(self, config: Config, run_dir: str | Path, resume: dict | None = None, world=None,
                 run_id: str | None = None):
        # config: the run's totals (train ratio, budgets, intervals count env steps over all ranks);
        # share: this rank's envs, collector batch, replay batch and capacity (dreamer/distributed.py)
        self.world = world or SingleProcess()
        self.config, self.run_dir = config, Path(run_dir)
        self.share = rank_share(config, self.world.size)
        env_cfg, rep = config.env, config.replay
        self.local_rank = self.world.local_rank if self.world.size > 1 else None
        torch.manual_seed(config.seed)  # the same initial weights on every rank
        device = resolve_device(config.learner.device, self.local_rank)
        if device == "cpu" and config.learner.threads != "auto":
            torch.set_num_threads(config.learner.threads)
        self.spec = env_spec(env_cfg)
        self.obs = ObsSpec.from_spec(self.spec)
        self.action_dim = self.spec.action_dim
        self.agent = build_agent(config.world_model, config.learner, self.obs, self.action_dim, device,
                                 discrete=self.spec.discrete)
        if self.world.size > 1:
            self.world.broadcast_module(self.agent.loss)
            self.agent.optimizer.grad_sync = self.world.average_gradients
            torch.manual_seed(config.seed + 7919 * self.world.rank)  # each rank's own imagination noise
        wm = config.world_model
        self.context = ContextSpec(wm.stoch, wm.classes, wm.deter) if rep.context else None
        self.steps_per_update = rep.batch_size * rep.batch_length / config.learner.train_ratio
        expected = max(0, config.collector.total_frames - config.learner.prefill_frames) / self.steps_per_update
        self.learner = Learner(self.agent, config.learner, self.context, expected_updates=expected)
        flags = self.learner.flags
        cache = f" (compile cache: {compile_cache_dir()})" if flags.compile or flags.regional else ""
        if self.world.is_main:
            threads = f", {torch.get_num_threads()} thread(s)" if device == "cpu" else ""
            print(f"learner: {flags.describe()}{threads}, ~{expected:,.0f} updates planned{cache}", flush=True)
            if mkl_amd.STATUS:  # an AMD CPU with AVX-512: whether MKL runs its AVX-512 kernels
                print(mkl_amd.STATUS, flush=True)
        self.acting = build_acting_policy(self.agent.nets)  # weight source for the inference server
        # batch_length + 1 records: the first is context (its latent starts the sequence), the
        # others are the trained steps (dreamer/learner.py).
        share = self.share.replay
        self.replay = SequenceReplay(self.share.collector.num_envs, share.capacity, share.batch_size,
                                     rep.batch_length + 1, directory=self.replay_dir(resume))
        self.tracker = EpisodeTracker(stats=self.spec.stats)
        self.frames_at_start = 0
        self.nonfinite_in_row = 0
        self.synced_at = 0  # learner updates at the last weight push
        self.run_id = None
        self.refill: tuple[int, int] | None = None
        if resume is not None:
            self.load_state_dict(resume)
        if run_id is not None:  # the logger's run (a resumed wandb run keeps its id)
            self.run_id = run_id
        self.prefetcher = None  # started at the first update (replay can sample by then)
        self.collector = None
        self.watchdog = None
        self.collector_stopped = False
        self._paused = None
        self._agreed_frames = 0  # this run's env steps over all ranks, as of the last agree()
        self._all_can_sample = False
        self.collect_budget = 0  # env steps this rank's collector takes (tracker count), set at start

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

    # -- collection -------------------------------------------------------------------------
    def start_collector(self) -> None:
        cfg, col = self.config, self.share.collector
        primer = primer_factory(cfg.world_model, self.action_dim)
        weights = {k: v.detach().cpu() for k, v in self.acting.state_dict().items()}
        prefilling = self.frames < cfg.learner.prefill_frames
        factory = DreamerPolicyFactory(cfg.world_model, self.obs, self.action_dim, discrete=self.spec.discrete,
                                       explore=True,
                                       device=resolve_device(col.device, self.local_rank), state_dict=weights,
                                       random_actions=prefilling)
        gpus = torch.cuda.device_count()
        first = self.world.rank * col.num_envs  # this rank's envs: global indices first.. (own seeds)
        remaining = cfg.collector.total_frames - self.frames
        self.collect_budget = self.tracker.frames + -(-remaining // self.world.size)  # this rank's
        self.records = ReplayRecords(self.obs.keys, self.context, stats=self.spec.stats)
        self.heartbeat_dir = tempfile.mkdtemp(prefix="dreamer-heartbeats-")  # removed in stop_collector
        self.heartbeats = [(os.path.join(self.heartbeat_dir, str(first + i)), f"env worker {first + i} ({cfg.env.name})")
                           for i in range(col.num_envs)]
        self.collector = build_collector(
            [env_factory(cfg.env, seed=cfg.seed * 10_000 + first + i + self.frames, extra_transform=primer,
                         worker=first + i, heartbeat=self.heartbeats[i][0], error_log=str(self.run_dir / "train.log"),
                         render_device=placement.render_device(first + i, cfg.env.render_devices, gpus,
                                                               self.local_rank))
             for i in range(col.num_envs)],
            factory,
            frames_per_batch=col.frames_per_batch,
            total_frames=self.collect_budget - self.tracker.frames,
            chunk_size=col.chunk_size(),
            transport=col.transport,
            static_batch_size=col.inference_static_batch_size,
            policy_device=resolve_device(col.device, self.local_rank),
            replay=self.replay,
            records=self.records,
            on_write=self.tracker,
        )
        before = {p.pid for p in psutil.Process().children()}
        with children_ignore_stop_signals():  # the server and workers start here
            self.collector.start()
        if not hasattr(self.collector, "_replay_thread"):  # check_collector's fault check reads it
            raise RuntimeError("torchrl's AsyncBatchedCollector has no _replay_thread (torchrl 0.14.1 has): the "
                               "writer thread's faults would go unseen; check the pinned torchrl")
        started = [p.pid for p in psutil.Process().children() if p.pid not in before
                   and "resource_tracker" not in " ".join(_cmdline(p))]
        self.watchdog = ProcessWatchdog(started, heartbeats=self.heartbeats, env_timeout_s=col.env_timeout_s).start()

    def hold_collection(self, hold: bool) -> None:
        """Pause (True) or resume (False) the collector; idempotent. A no-op once it is stopped."""
        if self.collector_stopped:  # (killed: pausing or resuming its dead processes would fail)
            self._paused = None
            return
        if hold and self._paused is None and self.frames < self.config.collector.total_frames:
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
        thread = self.collector._replay_thread  # torchrl's writer thread (start_collector checked it exists)
        if thread is not None and not thread.is_alive() and self.tracker.frames < self.collect_budget:
            self.collector.async_shutdown()  # re-raises the writer thread's error
            raise RuntimeError("collection stopped before collector.total_frames")

    def stop_collector(self, kill: bool = False) -> None:
        """Stop workers and server (idempotent): once the budget is met they only cost CPU. `kill`:
        end them at once, without the orderly shutdown (which waits on their shared locks)."""
        if self.collector is None or self.collector_stopped:
            return
        self.collector_stopped = True
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

    def push_weights(self) -> None:
        if not self.collector_stopped:
            with self.watchdog.guard():
                self.collector.update_policy_weights_(self.acting)
        self.synced_at = self.updates

    # -- learning ---------------------------------------------------------------------------
    def update(self, push: bool = True) -> dict:
        """One learner update. Non-finite gradients: the optimizer skips the step (weights stay as
        they were), the update still counts toward the train ratio, and after
        learner.max_nonfinite_updates of them in a row the run stops (a checkpoint is written)."""
        start = time.perf_counter()
        batch, meta = self.next_batch()
        sampled = time.perf_counter()
        metrics = self.learner.step(batch)
        if self.world.size > 1:  # return-normalisation statistics: the same on every rank
            self.world.average_buffers(self.agent.loss.actor_loss.retnorm)
        refreshed = self.learner.refreshed_context()
        if refreshed is not None:  # the learner's posteriors replace the stored latents (official)
            self.replay.write_back(meta["index"][:, 1:], TensorDict({CONTEXT: refreshed}, refreshed.shape),
                                   meta["step_count"][:, 1:])
        # The guard's one host check per update (a non-finite loss gives non-finite gradients): it
        # keeps its promise exactly, no weight moves on such a step. Metrics stay on the device.
        skipped = self.agent.optimizer.last_step_skipped
        self.nonfinite_in_row = self.nonfinite_in_row + 1 if skipped else 0
        metrics["skipped_updates"] = float(self.agent.optimizer.skipped)
        # Host wall time per update: waiting for the batch (the whole sample without prefetch) and
        # the rest (the guard's check above waits for the device: the update's full time).
        metrics["sample_wait_ms"] = 1000 * (sampled - start)
        metrics["update_ms"] = 1000 * (time.perf_counter() - sampled)
        limit = self.config.learner.max_nonfinite_updates
        if self.nonfinite_in_row >= limit:
            raise NonFiniteLossError(f"{limit} updates in a row had non-finite losses or gradients "
                                     "(learner.max_nonfinite_updates); the weights are those before them")
        if push:
            self.push_if_due()
        return metrics

    def replay_dir(self, resume: dict | None) -> Path | None:
        """None (replay in RAM), the checkpoint's replay files, or this run's (one dir per rank)."""
        if resume is not None and resume.get("replay_dir") is not None:
            return Path(resume["replay_dir"])
        if self.config.replay.storage != "disk":
            return None
        directory = replay_dir(self.config, self.run_dir)
        return directory / f"rank{self.world.rank}" if self.world.size > 1 else directory

    def prefetch_depth(self) -> int:
        depth = self.config.replay.prefetch
        return (1 if self.agent.device.type == "cuda" else 0) if depth == "auto" else depth

    def next_batch(self) -> tuple[TensorDictBase, TensorDictBase]:
        """(a replay batch, its index and step_count on the host): from the prefetcher, or sampled
        here. With prefetch a batch may predate the previous update's latent write-back (its
        context is one update older, as in any asynchronous sampler)."""
        if self.prefetcher is None and self.prefetch_depth() > 0:
            self.prefetcher = Prefetcher(self.replay.sample, self.agent.device, self.prefetch_depth())
        if self.prefetcher is not None:
            return self.prefetcher.get()
        batch = self.replay.sample()
        return batch, batch

    def stop_prefetch(self) -> None:
        if self.prefetcher is not None:
            self.prefetcher.close()
            self.prefetcher = None

    def push_if_due(self) -> None:
        every = self.config.collector.policy_sync_every
        if self.updates == 1 or self.updates - self.synced_at >= every:
            self.push_weights()

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self, with_replay: bool) -> dict:
        return {
            "loss": self.agent.loss.state_dict(),
            "optimizer": self.agent.optimizer.state_dict(),
            "frames": self.frames,
            "updates": self.updates,
            "rng": rng_state(),
            "run_id": self.run_id,
            "replay": ([plain_stream(self.replay.stream(e)) for e in range(self.replay.num_envs)]
                       if with_replay and self.replay.directory is None else None),
            "replay_disk": (replay_disk.checkpoint_state(self.replay, self.replay.directory, self.run_dir)
                            if with_replay and self.replay.directory is not None else None),
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
            # (env steps, updates) at the resume: without the replay, a burst of catch-up updates on
            # the first few new sequences would overfit them; collect a fresh prefill first.
            self.refill = (state["frames"], state["updates"])
        if state.get("replay_dir") is not None:  # on disk: the checkpoint's files, reopened
            late = replay_disk.reopen(self.replay, state["replay_disk"], Path(state["replay_dir"]))
            if any(late) and self.world.is_main:
                print(f"replay: {sum(late)} records written after the checkpoint are ignored", flush=True)
        elif state["replay"] is not None:
            for env, stream in enumerate(state["replay"]):
                if stream is not None:
                    self.replay.member(env).extend(TensorDict(stream["data"], batch_size=[stream["length"]]))
        set_rng_state(state["rng"])
        if self.world.size > 1:  # rank 0's RNG state was saved: each rank draws its own noise again
            torch.manual_seed(self.config.seed + 7919 * self.world.rank + state["updates"])

    def save_checkpoint(self) -> Path:
        cfg = self.config.checkpoint
        on_disk = self.replay.directory is not None
        replay_gib = self.replay_bytes() / 2**30 if cfg.replay and not on_disk else 0.0
        with_replay = cfg.replay and replay_gib <= cfg.replay_max_gb and self.world.size == 1
        if cfg.replay and self.world.size > 1:
            log.info("data-parallel run: checkpoints hold no replay (each rank's is its own)")
        elif cfg.replay and not with_replay:
            log.warning("replay (%.1f GiB) exceeds checkpoint.replay_max_gb; checkpoint holds no replay "
                        "(replay.storage=disk keeps a replay of any size: its checkpoints locate the files)", replay_gib)
        held = self.prefetcher.paused() if self.prefetcher is not None else contextlib.nullcontext()
        with held:  # no sample moves the RNG or reads replay while the state is taken
            state = self.state_dict(with_replay)
        return checkpoint.save(self.run_dir / "checkpoints", self.frames, state, cfg.keep)

    def replay_bytes(self) -> int:
        total = 0
        for env in range(self.replay.num_envs):
            member = self.replay.member(env)
            if len(member):
                total += member.storage[:1].bytes() * len(member)
        return total
