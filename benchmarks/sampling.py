"""Replay sampling beside the learner update, with and without prefetch (part of make bench-learner).

The app's replay (SequenceReplay: one ring per env, records laid out as replay/records.py
stores them, with the replay context) holds 64 envs of 64x64 pixels. For each batch shape
BxT it measures, in one run:
  sample ms         one batch sampled (T + 1 records per row) and put on the learner's device
                    (pinned, non_blocking on CUDA: what the prefetch thread does)
  update ms         one learner update on that batch, with the latent write-back into replay
  loop, no prefetch wall time per update when the main thread samples, then updates (replay.prefetch=0)
  loop, prefetch    the same with replay/prefetch.py sampling the next batch meanwhile (replay.prefetch=1)
and prints them beside max(sample, update) and sample + update: with prefetch the loop should sit
near the former. The learner here is eager (its flags are printed); CUDA work is synchronised
once per update, as the trainer's non-finite guard does.
"""
from __future__ import annotations

import logging
import time

import torch
from tensordict import TensorDict

from dreamer.agent.learner import Learner
from dreamer.agent.model import build_agent
from dreamer.agent.obs import ObsSpec
from replay.buffer import SequenceReplay
from replay.prefetch import Prefetcher
from replay.records import CONTEXT, ContextSpec

ACTION_DIM = 6


def sync() -> None:
    if torch.cuda.is_available():  # CUDA work is queued: time it to its end
        torch.cuda.synchronize()


def filled_replay(num_envs: int, per_env: int, batch: int, length: int, context: ContextSpec) -> SequenceReplay:
    """`per_env` records for each of `num_envs` envs, written env-interleaved as the collector does."""
    replay = SequenceReplay(num_envs, capacity=num_envs * per_env, batch_size=batch, batch_length=length + 1)
    g = torch.Generator().manual_seed(0)
    for start in range(0, per_env, 64):  # chunks of 64 steps per env, like transition_chunk_size=64
        steps = min(64, per_env - start)
        n = steps * num_envs
        replay.extend(TensorDict({
            "pixels": torch.randint(0, 256, (n, 3, 64, 64), dtype=torch.uint8, generator=g),
            "action": torch.rand(n, ACTION_DIM, generator=g) * 2 - 1,
            "is_init": torch.zeros(n, 1, dtype=torch.bool),
            "is_last": torch.zeros(n, 1, dtype=torch.bool),
            "step_count": torch.arange(start, start + steps).repeat_interleave(num_envs).reshape(n, 1),
            "env_index": torch.arange(num_envs).repeat(steps),
            "policy_version": torch.zeros(n, dtype=torch.int64),
            "next": {"reward": torch.rand(n, 1, generator=g), "done": torch.zeros(n, 1, dtype=torch.bool),
                     "terminated": torch.zeros(n, 1, dtype=torch.bool),
                     "truncated": torch.zeros(n, 1, dtype=torch.bool)},
            CONTEXT: {"state": torch.randint(0, context.classes, (n, context.stoch), dtype=torch.uint8, generator=g),
                      "belief": torch.zeros(n, context.deter, dtype=torch.float16)},
        }, [n]))
    return replay


def to_device(batch: TensorDict, device: torch.device) -> TensorDict:
    if device.type == "cuda":
        return batch.pin_memory().to(device, non_blocking=True)
    return batch


def measure(replay: SequenceReplay, learner: Learner, updates: int) -> dict[str, float]:
    device = learner.agent.device

    def update(batch, meta) -> None:
        learner.step(batch)
        refreshed = learner.refreshed_context()
        if refreshed is not None:
            replay.write_back(meta["index"][:, 1:], TensorDict({CONTEXT: refreshed}, refreshed.shape),
                              meta["step_count"][:, 1:])
        sync()

    def timed(fn, n: int) -> float:
        fn()  # once outside the window (allocations, first touch)
        sync()
        start = time.perf_counter()
        for _ in range(n):
            fn()
        sync()
        return 1000 * (time.perf_counter() - start) / n

    sample_ms = timed(lambda: to_device(replay.sample(), device), max(updates, 5))
    fixed = replay.sample()
    on_device = to_device(fixed, device)
    update_ms = timed(lambda: update(on_device, fixed), updates)

    def serial() -> None:
        batch = replay.sample()
        update(to_device(batch, device), batch)

    serial_ms = timed(serial, updates)
    prefetcher = Prefetcher(replay.sample, device, depth=1)
    try:
        prefetched_ms = timed(lambda: update(*prefetcher.get()), updates)
    finally:
        prefetcher.close()
    return {"sample_ms": sample_ms, "update_ms": update_ms, "loop_ms": serial_ms, "loop_prefetch_ms": prefetched_ms}


def run(shapes: list[tuple[int, int]], wm_cfg, learner_cfg, updates: int, num_envs: int = 64) -> list[dict]:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    logging.getLogger("torchrl").setLevel(logging.WARNING)  # one storage line per env otherwise
    context = ContextSpec(wm_cfg.stoch, wm_cfg.classes, wm_cfg.deter)
    rows = []
    for batch, length in shapes:
        replay = filled_replay(num_envs, length + 65, batch, length, context)
        torch.manual_seed(0)
        agent = build_agent(wm_cfg, learner_cfg, ObsSpec.from_env("pixels", 64), ACTION_DIM, device)
        row = {"batch": batch, "length": length, **measure(replay, Learner(agent, learner_cfg, context), updates)}
        rows.append(row)
        print(f"B{batch} x T{length}: {row}", flush=True)
    return rows


def print_table(rows: list[dict], num_envs: int = 64) -> None:
    print(f"\nreplay: {num_envs} envs, pixels 64x64, replay context; eager learner, the loop's wall time per update\n")
    print("| batch | sample ms | update ms | loop, no prefetch | loop, prefetch | max(sample, update) | sample + update |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        s, u = r["sample_ms"], r["update_ms"]
        print(f"| {r['batch']} x {r['length']} | {s:.1f} | {u:.1f} | {r['loop_ms']:.1f} | {r['loop_prefetch_ms']:.1f} "
              f"| {max(s, u):.1f} | {s + u:.1f} |")
