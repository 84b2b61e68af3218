"""Learner benchmark: ms/update of the app's Learner vs a bare torchrl DreamerV3OptimizationStepper,
and replay sampling beside the update with and without prefetch.

    python -m benchmarks.learner [--size s] [--batch 16] [--length 64] [--updates 3]
                                 [--modes eager,compiled,cudagraph-bf16,regional | --compile]
                                 [--sampling-shapes 16x64,32x256] [--sampling-size SIZE] [--json FILE]

Learner rows run on the same fixed replay-shaped pixel batch (64x64, 6-dim action), so the app's
own overhead (batch conversion, metrics) is a measured ratio. Modes: `eager` (fp32), `compiled`
(torch.compile, fp32), `cudagraph-bf16` (compiled + CUDA graph + bf16 autocast: CUDA only),
`regional` (the hot regions only, patches/regional.py; its bare-stepper column stays eager);
`--compile` adds the compiled modes this device supports (slow to compile on a CPU: minutes).
Per row: ms/update (after the first update), the first update's seconds (compile/capture
included) and peak GPU memory. The sampling table (benchmarks/sampling.py) prints first,
`--sampling-shapes ''` skips it; the learner table prints last. `--json` rewrites FILE after
every row, so a run stopped early keeps what it measured.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch
from hydra import compose, initialize_config_dir
from tensordict import TensorDict
from torchrl.trainers.algorithms import DreamerV3OptimizationStepper

from benchmarks import sampling
from dreamer.agent.learner import Learner, to_loss_batch
from dreamer.agent.model import build_agent, count_parameters
from dreamer.agent.obs import ObsSpec
from dreamer.config import register_configs, validate

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
MODES = {  # name -> (compile, cudagraph, bf16)
    "eager": (False, False, False),
    "compiled": (True, False, False),
    "cudagraph-bf16": (True, True, True),
    "regional": ("regional", False, False),  # the hot regions only (patches/regional.py)
}


def replay_batch(batch: int, length: int, action_dim: int) -> TensorDict:
    """A [B, T] batch of replay records (root pixels, action, is_init, next reward/flags): T - 1 trained steps."""
    g = torch.Generator().manual_seed(0)
    is_init = torch.zeros(batch, length, 1, dtype=torch.bool)
    is_init[:, 0] = True
    return TensorDict({
        "pixels": torch.randint(0, 256, (batch, length, 3, 64, 64), dtype=torch.uint8, generator=g),
        "action": torch.rand(batch, length, action_dim, generator=g) * 2 - 1,
        "is_init": is_init,
        "next": {"reward": torch.rand(batch, length, 1, generator=g),
                 "done": torch.zeros(batch, length, 1, dtype=torch.bool),
                 "terminated": torch.zeros(batch, length, 1, dtype=torch.bool)},
    }, [batch, length])


def time_updates(step, updates: int) -> tuple[float, float]:
    """(seconds of the first update: allocations, lazy init, compile; ms per later update)."""
    start = time.perf_counter()
    step()
    sampling.sync()
    first_s = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(updates):
        step()
    sampling.sync()
    return first_s, 1000 * (time.perf_counter() - start) / updates


def peak_gib() -> float | None:
    if not torch.cuda.is_available():
        return None
    peak = torch.cuda.max_memory_allocated() / 2**30
    torch.cuda.reset_peak_memory_stats()
    return peak


def chosen_modes(args, cuda: bool) -> list[str]:
    if args.modes == "none":
        return []
    if args.modes:
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
        unknown = [m for m in modes if m not in MODES]
        if unknown:
            raise SystemExit(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    else:
        modes = ["eager"] + ((["compiled", "cudagraph-bf16"] if cuda else ["compiled"]) if args.compile else [])
    if not cuda and "cudagraph-bf16" in modes:
        print("cudagraph-bf16: skipped, needs CUDA")
        modes.remove("cudagraph-bf16")
    return modes


def learner_row(cfg, mode: str, batch: TensorDict, updates: int, device: str) -> dict:
    cfg.learner.compile, cfg.learner.cudagraph, cfg.learner.bf16 = MODES[mode]
    obs, action_dim = ObsSpec.from_env("pixels", 64), batch["action"].shape[-1]
    torch.manual_seed(0)
    agent = build_agent(cfg.world_model, cfg.learner, obs, action_dim, device)
    learner = Learner(agent, cfg.learner)
    peak_gib()
    app_first, app_ms = time_updates(lambda: learner.step(batch), updates)
    app_peak = peak_gib()
    torch.manual_seed(0)
    bare_agent = build_agent(cfg.world_model, cfg.learner, obs, action_dim, device)
    stepper = DreamerV3OptimizationStepper(bare_agent.loss, bare_agent.optimizer, bare_agent.target_updater,
                                           compile_train_step=learner.flags.compile,
                                           cudagraph=learner.flags.cudagraph,
                                           mixed_precision=learner.flags.bf16)
    loss_batch = to_loss_batch(batch.to(device), bare_agent)  # converted once: the bare baseline

    def bare_step():
        if stepper_needs_warmup[0]:
            stepper.warmup(loss_batch)
            stepper_needs_warmup[0] = False
        stepper.step(None, loss_batch)

    stepper_needs_warmup = [learner.flags.compile or learner.flags.cudagraph]
    bare_first, bare_ms = time_updates(bare_step, updates)
    return {"mode": mode, "flags": dataclasses.asdict(learner.flags),
            "app_ms": app_ms, "app_first_s": app_first, "bare_ms": bare_ms, "bare_first_s": bare_first,
            "peak_gib": app_peak, "parameters": count_parameters(agent)["total"]}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="s")
    parser.add_argument("--batch", type=int, default=16)  # the paper's batch: 16 sequences x 64 steps
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--modes", default="", help="comma-separated: " + ", ".join(MODES) + "; none: no learner rows")
    parser.add_argument("--compile", action="store_true", help="add the compiled modes this device supports")
    parser.add_argument("--sampling-shapes", default="16x64,32x256",
                        help="BxT batch shapes of the replay sampling table; '' skips it")
    parser.add_argument("--sampling-size", default=None,
                        help="model size for the sampling table's updates (default: --size on CUDA, tiny on CPU)")
    parser.add_argument("--sampling-updates", type=int, default=3)
    parser.add_argument("--json", default=None, help="write results here (rewritten after every row)")
    args = parser.parse_args(argv)
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    register_configs()

    def config(size: str):
        with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
            return validate(compose(config_name="config", overrides=[f"world_model={size}", "learner.compile=false"]))

    results = {"device": torch.cuda.get_device_name() if cuda else "cpu", "threads": torch.get_num_threads(),
               "size": args.size, "batch": args.batch, "length": args.length, "sampling": [], "learner": []}

    def save() -> None:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)

    shapes = [tuple(int(x) for x in s.lower().split("x")) for s in args.sampling_shapes.split(",") if s.strip()]
    if shapes:
        cfg = config(args.sampling_size or (args.size if cuda else "tiny"))
        results["sampling_size"] = cfg.world_model.size
        results["sampling"] = sampling.run(shapes, cfg.world_model, cfg.learner, args.sampling_updates)
        save()
    cfg = config(args.size)
    batch = replay_batch(args.batch, args.length + 1, 6)  # + the context record
    for mode in chosen_modes(args, cuda):
        row = learner_row(cfg, mode, batch, args.updates, device)
        results["learner"].append(row)
        save()
        print(f"{mode}: app {row['app_ms']:.0f} ms/update (first {row['app_first_s']:.1f} s), "
              f"bare stepper {row['bare_ms']:.0f} ms/update", flush=True)
    if results["sampling"]:
        sampling.print_table(results["sampling"])
        print(f"(sampling table: world_model={results['sampling_size']})")
    if not results["learner"]:
        return
    params = results["learner"][0]["parameters"]
    print(f"\nworld_model={args.size} ({params:,} parameters), pixels 64x64, B{args.batch} x T{args.length}, "
          f"device {results['device']}, {results['threads']} threads, {args.updates} timed updates per row\n")
    print("| learner | app ms/update | app updates/s | bare stepper ms/update | app / bare | first update s "
          "| peak GPU GiB |")
    print("|---|---|---|---|---|---|---|")
    for r in results["learner"]:
        peak = "-" if r["peak_gib"] is None else f"{r['peak_gib']:.2f}"
        print(f"| {row_name(r['mode'])} | {r['app_ms']:.0f} | {1000 / r['app_ms']:.2f} | {r['bare_ms']:.0f} "
              f"| {r['app_ms'] / r['bare_ms']:.2f} | {r['app_first_s']:.1f} | {peak} |")


def row_name(mode: str) -> str:
    return {"eager": "eager fp32", "compiled": "compiled fp32",
            "cudagraph-bf16": "compiled + cudagraph bf16", "regional": "regional fp32"}[mode]


if __name__ == "__main__":
    main()
