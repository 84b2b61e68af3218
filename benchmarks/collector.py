"""Collector benchmark: driver CPU per env step and steps/s per transition chunk size.

    python -m benchmarks.collector [--env cartpole/balance | --env PRESET] [--obs proprio] [--num-envs 2]
                               [--steps 3000] [--chunks 1,16,64,auto]

--env takes a DMC domain/task or any env preset of conf/env (atari_pong, crafter, gym_cartpole).

Every chunk size runs on the same envs and random policy in one run. Measured over a steady-state
window after the first `--warmup` steps (worker start-up excluded):
  steps/s            transitions written to replay per wall-clock second
  driver CPU ms/step the main process's user+sys CPU (all its threads) over the transitions collected
An env-only baseline steps the same envs with random actions in plain processes (no collector,
no policy server), the physical limit of this machine; the table shows each run as a share of it.
A "step" is one agent step (env.action_repeat physics frames). The table prints last.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import collectors  # noqa: F401  (MUJOCO_GL)
from omegaconf import OmegaConf

from collectors.collector import RandomPolicyFactory, build_collector
from collectors.envs import env_factory, random_actions
from replay.buffer import SequenceReplay
from collectors.specs import env_spec


def cpu_seconds() -> float:
    # this process's user + system time at ns resolution (os.times() ticks in 10 ms: a short window
    # on a fast machine read 0 and the ratio divided by it)
    return time.process_time()


def run_collector(env_cfg, num_envs: int, chunk, steps: int, warmup: int, frames_per_batch: int) -> dict:
    chunk_size = max(1, min(64, frames_per_batch // num_envs)) if chunk == "auto" else int(chunk)
    replay = SequenceReplay(num_envs, capacity=steps + warmup + 1024, batch_size=1, batch_length=2)
    collector = build_collector(
        [env_factory(env_cfg, seed=i) for i in range(num_envs)],
        RandomPolicyFactory(env_spec(env_cfg).action_dim, discrete=env_spec(env_cfg).discrete),
        frames_per_batch=frames_per_batch, total_frames=warmup + steps, chunk_size=chunk_size, replay=replay)
    window_start = None
    try:
        for _ in collector:
            if window_start is None and len(replay) >= warmup:
                window_start = (time.perf_counter(), cpu_seconds(), len(replay))
        end = (time.perf_counter(), cpu_seconds(), len(replay))
    finally:
        collector.shutdown()
    wall, cpu, n = (e - s for e, s in zip(end, window_start))
    return {"chunk": f"{chunk}" + (f" ({chunk_size})" if chunk == "auto" else ""),
            "steps_per_s": n / wall, "driver_ms_per_step": 1000 * cpu / n, "steps": n}


def _env_only_worker(args) -> tuple[int, float]:
    env_cfg, seed, steps = args
    env = env_factory(OmegaConf.create(env_cfg), seed=seed)()
    random_actions(env, 20)  # warm-up: GL context, first render
    start = time.perf_counter()
    random_actions(env, steps)
    return steps, time.perf_counter() - start


def run_env_only(env_cfg, num_envs: int, steps: int) -> dict:
    per_env = max(1, steps // num_envs)
    plain_cfg = OmegaConf.to_container(env_cfg)
    with mp.get_context("spawn").Pool(num_envs) as pool:
        results = pool.map(_env_only_worker, [(plain_cfg, i, per_env) for i in range(num_envs)])
    return {"chunk": "env only", "steps_per_s": sum(n / t for n, t in results),
            "driver_ms_per_step": float("nan"), "steps": sum(n for n, _ in results)}


def format_table(rows: list[dict], baseline: dict) -> str:
    chunk1 = next((r for r in rows if r["chunk"] == "1"), None)
    lines = ["| chunk | steps/s | driver CPU ms/step | driver CPU saved vs chunk 1 | share of env-only steps/s |",
             "|---|---|---|---|---|"]
    for row in rows:
        ratio = f"{chunk1['driver_ms_per_step'] / row['driver_ms_per_step']:.1f}x" if chunk1 else "-"
        share = f"{100 * row['steps_per_s'] / baseline['steps_per_s']:.0f}%"
        lines.append(f"| {row['chunk']} | {row['steps_per_s']:.0f} | {row['driver_ms_per_step']:.3f} | "
                     f"{ratio} | {share} |")
    lines.append(f"| env only (no collector) | {baseline['steps_per_s']:.0f} | - | - | 100% |")
    return "\n".join(lines)


def bench_env(args):
    """EnvConfig fields of `--env`: a conf/env preset, or a DMC domain/task with --obs."""
    import dataclasses
    from pathlib import Path

    import yaml

    from dreamer.config import EnvConfig

    preset = Path(__file__).resolve().parents[1] / "conf" / "env" / f"{args.env}.yaml"
    if preset.exists():
        cfg = EnvConfig(**(yaml.safe_load(preset.read_text()) or {}))  # a preset lists what differs
    else:
        domain, task = args.env.split("/")
        cfg = EnvConfig(domain=domain, task=task, obs=args.obs, fast_visuals=args.fast_visuals)
    return OmegaConf.create({**dataclasses.asdict(cfg), "name": cfg.name})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="cartpole/balance", help="domain/task")
    parser.add_argument("--obs", default="proprio", choices=["proprio", "pixels"])
    parser.add_argument("--fast-visuals", action="store_true")
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3000, help="steps measured per chunk size")
    parser.add_argument("--warmup", type=int, default=512)
    parser.add_argument("--frames-per-batch", type=int, default=256)
    parser.add_argument("--chunks", default="1,16,64,auto")
    args = parser.parse_args(argv)
    env_cfg = bench_env(args)
    rows = []
    for chunk in args.chunks.split(","):
        row = run_collector(env_cfg, args.num_envs, chunk if chunk == "auto" else int(chunk), args.steps,
                            args.warmup, args.frames_per_batch)
        print(f"chunk {row['chunk']}: {row['steps_per_s']:.0f} steps/s, "
              f"driver {row['driver_ms_per_step']:.3f} ms CPU/step over {row['steps']} steps", flush=True)
        rows.append(row)
    baseline = run_env_only(env_cfg, args.num_envs, args.steps)
    print(f"env only: {baseline['steps_per_s']:.0f} steps/s", flush=True)
    print(f"\n{args.num_envs} x {env_cfg.suite} {env_cfg.name if 'name' in env_cfg else args.env} ({env_cfg.obs}), "
          f"action repeat {env_cfg.action_repeat}, random policy, "
          f"{os.cpu_count()} CPUs, frames_per_batch {args.frames_per_batch}, "
          f"{args.steps} steps measured after {args.warmup} warm-up steps per row\n")
    print(format_table(rows, baseline))


if __name__ == "__main__":
    main()
