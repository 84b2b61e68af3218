"""Inference-server latency per batch: static (padded, CUDA-graph captured) vs dynamic batches.

    python -m benchmarks.inference [--env walker/walk] [--obs pixels] [--num-envs 16] [--size s]
                                   [--seconds 20] [--static 16] [--json FILE]

The app's collector (process-slot server, chunked workers) serves the DreamerV3 acting policy to
`--num-envs` env workers, once with dynamic batches (whatever is ready, 1..num_envs) and once with
`collector.inference_static_batch_size=--static` (CUDA only: the server captures a CUDA graph of
that batch and pads partial batches). torchrl's server counts, per forward: the batch size, the
forward's wall time and each request's queue wait; the table shows their medians and 95th
percentiles over the steady-state window (after `--warmup-s`), with env steps/s.
"""
from __future__ import annotations

import argparse
import json
import logging
import time

import torch
from hydra import compose, initialize_config_dir

import collectors  # noqa: F401  (MUJOCO_GL)
from collectors.collector import build_collector
from collectors.envs import env_factory
from collectors.specs import env_spec
from dreamer.agent.obs import ObsSpec
from dreamer.agent.policy import DreamerPolicyFactory, primer_factory
from dreamer.config import placement, register_configs, validate

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def serve(cfg, static: int | None, seconds: float, warmup_s: float) -> dict:
    spec = env_spec(cfg.env)
    obs = ObsSpec.from_spec(spec)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    factory = DreamerPolicyFactory(cfg.world_model, obs, spec.action_dim, discrete=spec.discrete, explore=True,
                                   device=device)
    primer = primer_factory(cfg.world_model, spec.action_dim)
    num_envs, gpus = cfg.collector.num_envs, torch.cuda.device_count()
    collector = build_collector(
        [env_factory(cfg.env, seed=i, extra_transform=primer,
                     render_device=placement.render_device(i, cfg.env.render_devices, gpus))
         for i in range(num_envs)],
        factory, frames_per_batch=num_envs * 16, total_frames=10**9, chunk_size=16,
        static_batch_size=static, policy_device=device)
    try:
        start, window = time.perf_counter(), None
        for batch in collector:
            now = time.perf_counter()
            if window is None and now - start >= warmup_s:
                collector.server_stats(reset=True)
                window = (now, 0)
            elif window is not None:
                window = (window[0], window[1] + batch.numel())
                if now - window[0] >= seconds:
                    break
        stats = collector.server_stats()
        steps_per_s = window[1] / (time.perf_counter() - window[0]) if window else 0.0
    finally:
        collector.shutdown(raise_on_error=False)
    return {"batching": f"static {static}" if static else "dynamic", "env_steps_per_s": steps_per_s, **stats}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="walker/walk", help="DMC domain/task")
    parser.add_argument("--obs", default="pixels")
    parser.add_argument("--num-envs", type=int, default=16)
    parser.add_argument("--size", default="s")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup-s", type=float, default=10.0)
    parser.add_argument("--static", type=int, default=16, help="static batch size (CUDA only); 0 skips")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    logging.getLogger("torchrl").setLevel(logging.WARNING)
    domain, task = args.env.split("/")
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = validate(compose(config_name="config", overrides=[
            f"env.domain={domain}", f"env.task={task}", f"env.obs={args.obs}", f"world_model={args.size}",
            f"collector.num_envs={args.num_envs}", "logger.backends=[]"]))
    modes: list[int | None] = [None]
    if args.static:
        if torch.cuda.is_available():
            modes.append(args.static)
        else:
            print(f"static {args.static}: skipped, a static batch needs a CUDA inference device")
    rows = []
    for static in modes:
        rows.append(serve(cfg, static, args.seconds, args.warmup_s))
        print(rows[-1], flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"env": args.env, "obs": args.obs, "num_envs": args.num_envs, "size": args.size,
                           "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
                           "rows": rows}, f, indent=1)
    print(f"\ninference server: {args.num_envs} envs, {args.env} {args.obs}, world_model={args.size}\n")
    print("| batching | env steps/s | mean batch | forward ms p50 | forward ms p95 | queue ms p50 | queue ms p95 |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['batching']} | {r['env_steps_per_s']:.0f} | {r['avg_batch_size']:.1f} | {r['p50_forward_ms']:.2f} "
              f"| {r['p95_forward_ms']:.2f} | {r['p50_queue_ms']:.2f} | {r['p95_queue_ms']:.2f} |")


if __name__ == "__main__":
    main()
