"""The groups' config schemas (collector, world model, learner, replay, logger, eval, checkpoint),
each a dataclass holding its defaults (the yaml presets list only what differs) and checking its
own ranges in `__post_init__`; the env group's is dreamer/config/env.py. dreamer/config/__init__.py joins
them into the run's Config and checks what needs several groups at once."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, List, Optional

from dreamer.config.errors import _check


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


AUTO_CHOICES = ("auto", True, False)


def _check_auto_flag(value: Any, key: str) -> None:
    _check(value in AUTO_CHOICES, key, f"allowed values are auto, true, false (got {value!r})")


TRANSPORTS = ("process_slot", "thread")


@dataclass
class CollectorConfig:
    num_envs: int = 4  # env worker processes (all ranks together in a data-parallel run)
    frames_per_batch: int = 64  # env frames per collector iteration (all envs together)
    total_frames: int = 1_000_000  # env steps (agent steps; frames = steps x env.action_repeat)
    transition_chunk_size: Any = "auto"  # int >= 1 or "auto"
    inference_static_batch_size: Optional[int] = None  # null = dynamic batches
    transport: str = "process_slot"  # process_slot | thread (driver-side, for debugging)
    policy_sync_every: int = 1  # learner updates between weight pushes to the inference server
    device: str = "auto"  # inference device: auto = cuda if available else cpu
    # An env worker inside one step() or reset() this long ends the run naming it (a simulator
    # deadlock, a stalled network env); null waits forever. 300 s: far above any env's step, a Crafter
    # or DMC reset, or a first render that builds its GL context, even on a busy machine.
    env_timeout_s: Optional[float] = 300.0

    def __post_init__(self) -> None:
        _check(_is_int(self.num_envs) and self.num_envs >= 1, "collector.num_envs",
               f"must be an int >= 1 (got {self.num_envs!r})")
        _check(self.frames_per_batch >= 1, "collector.frames_per_batch",
               f"must be >= 1 (got {self.frames_per_batch})")
        _check(self.total_frames >= 1, "collector.total_frames", f"must be >= 1 (got {self.total_frames})")
        chunk = self.transition_chunk_size
        _check(chunk == "auto" or (_is_int(chunk) and chunk >= 1), "collector.transition_chunk_size",
               f"must be an int >= 1 or 'auto' (got {chunk!r})")
        static = self.inference_static_batch_size
        if static is not None:
            _check(1 <= static <= self.num_envs, "collector.inference_static_batch_size",
                   f"must be null or between 1 and collector.num_envs={self.num_envs} (got {static})")
        _check(self.transport in TRANSPORTS, "collector.transport",
               f"allowed values are {', '.join(TRANSPORTS)} (got {self.transport!r})")
        _check(self.policy_sync_every >= 1, "collector.policy_sync_every",
               f"must be >= 1 (got {self.policy_sync_every})")
        _check(self.env_timeout_s is None or self.env_timeout_s > 0, "collector.env_timeout_s",
               f"must be > 0 seconds, or null to wait forever (got {self.env_timeout_s})")
        _check(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
               "collector.device", f"allowed values are auto, cpu, cuda, cuda:N (got {self.device!r})")

    def chunk_size(self) -> int:
        """`auto`: 64 (the public reference setting), never more than one env's share of a batch."""
        if self.transition_chunk_size != "auto":
            return int(self.transition_chunk_size)
        return max(1, min(64, self.frames_per_batch // self.num_envs))


@dataclass
class WorldModelConfig:
    """Network sizes (world model, actor, critic). Presets: the official sizes size1m..size400m,
    and the 2023 paper's xs..xl (conf/world_model/)."""
    size: str = "s"  # the preset's name, for logs (the sizes are the keys below)
    deter: int = 512  # GRU (deterministic) state size
    hidden: int = 512  # hidden units inside the RSSM
    stoch: int = 32  # number of categorical latents
    classes: int = 32  # classes per latent
    blocks: int = 8  # block-diagonal GRU groups
    unimix: float = 0.01  # uniform mixture of the latent categoricals (and of a discrete actor)
    cnn_depth: int = 32  # channels of the first conv stage; stage i has cnn_depth x cnn_mults[i]
    cnn_mults: list[int] = field(default_factory=lambda: [1, 2, 4, 8])  # channel multiplier per conv stage
    mlp_units: int = 512  # units of every MLP: vector encoder/decoder, heads, actor, critic
    mlp_layers: int = 2  # hidden layers of the vector encoder and decoder
    head_layers: int = 2  # hidden layers of the reward and continue heads
    policy_layers: int = 2  # hidden layers of the actor and the critic

    def __post_init__(self) -> None:
        for name in ("deter", "hidden", "stoch", "classes", "cnn_depth", "mlp_units", "blocks"):
            value = getattr(self, name)
            _check(value >= 1, f"world_model.{name}", f"must be >= 1 (got {value})")
        for name in ("mlp_layers", "head_layers", "policy_layers"):
            value = getattr(self, name)
            _check(value >= 0, f"world_model.{name}", f"must be >= 0 (got {value})")
        _check(len(self.cnn_mults) >= 1 and all(m >= 1 for m in self.cnn_mults), "world_model.cnn_mults",
               f"must be a non-empty list of ints >= 1 (got {list(self.cnn_mults)})")
        _check(self.deter % self.blocks == 0, "world_model.blocks",
               f"must divide world_model.deter={self.deter} (got {self.blocks})")
        _check(0.0 <= self.unimix < 1.0, "world_model.unimix", f"must be in [0, 1) (got {self.unimix})")
        _check(self.classes <= 255, "world_model.classes",
               f"must be <= 255 (replay stores latent classes as uint8; got {self.classes})")


ACTOR_GRADS = ("reinforce", "dynamics", "auto")


@dataclass
class LearnerConfig:
    """Defaults: the current official DreamerV3 (danijar/dreamerv3 configs.yaml @ e3f0224); conf/learner/v1.yaml
    has the 2023 paper's values."""
    train_ratio: float = 512.0  # replayed steps per env step (DreamerV3 meaning)
    prefill_frames: int = 2500  # env steps of random actions before learning starts
    # reinforce (official, every action space) | dynamics (v1, continuous) | auto (dynamics if continuous)
    actor_grad: str = "reinforce"
    lr: float = 4e-5  # every part's learning rate unless overridden below
    model_lr: Optional[float] = None  # null: lr
    actor_lr: Optional[float] = None  # null: lr
    critic_lr: Optional[float] = None  # null: lr
    eps: float = 1e-20  # LaProp epsilon
    agc: float = 0.3  # adaptive gradient clipping: update norm <= agc x parameter norm, per tensor
    lr_warmup_steps: int = 1000  # updates of linear learning-rate warm-up
    loss_dyn: float = 1.0  # KL(sg(posterior) || prior)
    loss_rep: float = 0.1  # KL(posterior || sg(prior))
    loss_repval: float = 0.3  # value loss on replayed trajectories (trains the world model too)
    free_nats: float = 1.0  # KL terms are clipped below this
    imagination_horizon: int = 15  # imagined steps per start state for the actor and critic
    gamma: float = 0.997  # official: 1 - 1/333
    lmbda: float = 0.95  # lambda of the lambda-returns
    entropy_coef: float = 3e-4  # actor entropy bonus (on returns scaled to about [0, 1])
    compile: Any = "auto"  # auto | true | false | regional (hot regions only: patches/regional.py)
    cudagraph: Any = "auto"  # auto (on with CUDA) | true | false: capture the update in a CUDA graph
    bf16: Any = "auto"  # auto (on with CUDA) | true | false: bf16 autocast in the update
    device: str = "auto"  # learner device: auto = cuda if available else cpu | cpu | cuda | cuda:N
    # A CPU learner's intra-op threads: auto = torch's default (one per core, or OMP_NUM_THREADS); an
    # int sets it. Small models beside their collector on few cores run faster on 1 (experiment=cpu).
    threads: Any = "auto"
    max_nonfinite_updates: int = 10  # stop after this many non-finite updates in a row

    def __post_init__(self) -> None:
        _check(self.train_ratio > 0, "learner.train_ratio", f"must be > 0 (got {self.train_ratio})")
        _check(self.prefill_frames >= 0, "learner.prefill_frames", f"must be >= 0 (got {self.prefill_frames})")
        _check(self.actor_grad in ACTOR_GRADS, "learner.actor_grad",
               f"allowed values are {', '.join(ACTOR_GRADS)} (got {self.actor_grad!r})")
        _check(self.lr_warmup_steps >= 0, "learner.lr_warmup_steps", f"must be >= 0 (got {self.lr_warmup_steps})")
        _check(self.lr > 0, "learner.lr", f"must be > 0 (got {self.lr})")
        for name in ("model_lr", "actor_lr", "critic_lr"):
            value = getattr(self, name)
            _check(value is None or value > 0, f"learner.{name}", f"must be null or > 0 (got {value})")
        _check(self.eps > 0, "learner.eps", f"must be > 0 (got {self.eps})")
        _check(self.agc > 0, "learner.agc", f"must be > 0 (got {self.agc})")
        for name in ("loss_dyn", "loss_rep", "loss_repval", "free_nats", "entropy_coef"):
            value = getattr(self, name)
            _check(value >= 0, f"learner.{name}", f"must be >= 0 (got {value})")
        _check(self.imagination_horizon >= 1, "learner.imagination_horizon",
               f"must be >= 1 (got {self.imagination_horizon})")
        _check(0 < self.gamma < 1, "learner.gamma", f"must be in (0, 1) (got {self.gamma})")
        _check(0 <= self.lmbda <= 1, "learner.lmbda", f"must be in [0, 1] (got {self.lmbda})")
        _check(self.compile in (*AUTO_CHOICES, "regional"), "learner.compile",
               f"allowed values are auto, true, false, regional (got {self.compile!r})")
        for name in ("cudagraph", "bf16"):
            _check_auto_flag(getattr(self, name), f"learner.{name}")
        _check(self.max_nonfinite_updates >= 1, "learner.max_nonfinite_updates",
               f"must be >= 1 (got {self.max_nonfinite_updates})")
        _check(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
               "learner.device", f"allowed values are auto, cpu, cuda, cuda:N (got {self.device!r})")
        _check(self.threads == "auto" or (_is_int(self.threads) and self.threads >= 1), "learner.threads",
               f"must be auto or an int >= 1 (got {self.threads!r})")

    def part_lr(self, part: str) -> float:
        """The learning rate of `part` (model, actor, critic)."""
        value = getattr(self, f"{part}_lr")
        return self.lr if value is None else value


@dataclass
class ReplayConfig:
    capacity: int = 1_000_000  # transitions, all envs together
    batch_size: int = 16  # sequences per learner batch
    batch_length: int = 64  # trained steps per sequence (batch_length + 1 records are sampled)
    # Official replay_context 1: each record keeps the acting policy's latent after its observation,
    # a sampled sequence starts from its first record's latent (refreshed by the learner after each
    # update) instead of zeros.
    context: bool = True
    # Batches sampled ahead on a background thread (replay/prefetch.py), pinned and copied to
    # the learner's device: auto = 1 with a CUDA learner, 0 (sample on the main thread) on CPU.
    prefetch: Any = "auto"
    # memory (host RAM) | disk (memory-mapped files: bigger than RAM, checkpoints that locate them)
    # | auto: memory when it fits comfortably in the RAM left, else disk (dreamer/config/replay_plan.py)
    storage: str = "auto"
    dir: Optional[str] = None  # disk: where the replay files go; null: <run dir>/replay

    def __post_init__(self) -> None:
        _check(self.prefetch == "auto" or (_is_int(self.prefetch) and self.prefetch >= 0), "replay.prefetch",
               f"must be auto or an int >= 0 (got {self.prefetch!r})")
        _check(self.storage in ("auto", "memory", "disk"), "replay.storage",
               f"allowed values are auto, memory, disk (got {self.storage!r})")
        _check(self.batch_size >= 1, "replay.batch_size", f"must be >= 1 (got {self.batch_size})")
        _check(self.batch_length >= 2, "replay.batch_length", f"must be >= 2 (got {self.batch_length})")
        _check(self.capacity > self.batch_length, "replay.capacity",
               f"must be > replay.batch_length={self.batch_length} (got {self.capacity})")


LOGGER_BACKENDS = ("wandb", "tensorboard")


@dataclass
class LoggerConfig:
    # where metrics go besides the run dir's metrics.jsonl: any of wandb, tensorboard ([] = the file only)
    backends: List[str] = field(default_factory=lambda: ["wandb"])
    mode: str = "offline"  # wandb's: offline | online | disabled
    project: str = "dreamer-app"  # wandb's
    group: Optional[str] = None  # wandb's: multirun jobs of one sweep share a group
    every: int = 1000  # env steps between metric logs

    def __post_init__(self) -> None:
        unknown = [b for b in self.backends if b not in LOGGER_BACKENDS]
        _check(not unknown, "logger.backends",
               f"allowed values are {', '.join(LOGGER_BACKENDS)} (got {', '.join(map(repr, unknown))})")
        _check(self.mode in ("offline", "online", "disabled"), "logger.mode",
               f"allowed values are offline, online, disabled (got {self.mode!r})")
        _check(self.every >= 1, "logger.every", f"must be >= 1 (got {self.every})")


@dataclass
class EvalConfig:
    every: int = 10_000  # env steps between evaluations; 0 = never
    episodes: int = 1  # episodes per evaluation (the mean return is logged)
    video: bool = True  # an mp4 of the first episode (and the world model's open-loop prediction)
    sample_actions: bool = False  # sample the policy (the official evaluates so) instead of its mode

    def __post_init__(self) -> None:
        _check(self.every >= 0, "eval.every", f"must be >= 0 (got {self.every})")
        _check(self.episodes >= 1, "eval.episodes", f"must be >= 1 (got {self.episodes})")


@dataclass
class CheckpointConfig:
    every: int = 50_000  # env steps between checkpoints; 0 = only at the end
    keep: int = 2  # newest checkpoints kept in <run dir>/checkpoints
    replay: bool = True  # include the replay buffer (resume continues with the same data)
    replay_max_gb: float = 4.0  # a bigger replay is left out of checkpoints (with a warning)
    resume: Optional[str] = None  # a checkpoint file or a run's checkpoints/ dir (newest wins)

    def __post_init__(self) -> None:
        _check(self.every >= 0, "checkpoint.every", f"must be >= 0 (got {self.every})")
        _check(self.keep >= 1, "checkpoint.keep", f"must be >= 1 (got {self.keep})")
        _check(self.replay_max_gb >= 0, "checkpoint.replay_max_gb", f"must be >= 0 (got {self.replay_max_gb})")
        if self.resume is not None:
            _check(os.path.exists(self.resume), "checkpoint.resume", f"no such file or directory: {self.resume}")
