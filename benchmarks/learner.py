"""Learner benchmark: ms/update of the app's Learner vs a bare torchrl DreamerV3OptimizationStepper.

    python -m benchmarks.learner [--size s] [--batch 16] [--length 64] [--updates 3] [--compile]

Both run on the same fixed replay-shaped pixel batch (64x64, 6-dim action), in one run, so the
app's own overhead (batch conversion, metric extraction) is a measured ratio. `--compile` adds
torch.compile rows (slow to compile on CPU: minutes). The table prints last.
"""
from __future__ import annotations

import argparse
import time

import torch
from hydra import compose, initialize_config_dir
from tensordict import TensorDict
from torchrl.trainers.algorithms import DreamerV3OptimizationStepper

from dreamer.agent import ObsSpec, build_agent, count_parameters
from dreamer.config import register_configs, validate
from dreamer.learner import Learner, to_loss_batch

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


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


def _sync() -> None:
    if torch.cuda.is_available():  # CUDA work is queued: time it to its end
        torch.cuda.synchronize()


def time_updates(step, updates: int) -> float:
    step()  # first update outside the window (allocations, lazy init, compile)
    _sync()
    start = time.perf_counter()
    for _ in range(updates):
        step()
    _sync()
    return 1000 * (time.perf_counter() - start) / updates


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="s")
    parser.add_argument("--batch", type=int, default=16)  # the paper's batch: 16 sequences x 64 steps
    parser.add_argument("--length", type=int, default=64)
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args(argv)
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = validate(compose(config_name="config", overrides=[f"world_model={args.size}", "learner.compile=false"]))
    device = "cuda" if torch.cuda.is_available() else "cpu"
    obs, action_dim = ObsSpec.from_env("pixels", 64), 6
    batch = replay_batch(args.batch, args.length + 1, action_dim)  # + the context record
    rows = []
    for compiled in ([False, True] if args.compile else [False]):
        cfg.learner.compile = compiled
        torch.manual_seed(0)
        agent = build_agent(cfg.world_model, cfg.learner, obs, action_dim, device)
        learner = Learner(agent, cfg.learner)
        app_ms = time_updates(lambda: learner.step(batch), args.updates)
        torch.manual_seed(0)
        bare_agent = build_agent(cfg.world_model, cfg.learner, obs, action_dim, device)
        stepper = DreamerV3OptimizationStepper(bare_agent.loss, bare_agent.optimizer, bare_agent.target_updater,
                                               compile_train_step=learner.flags.compile,
                                               cudagraph=learner.flags.cudagraph,
                                               mixed_precision=learner.flags.bf16)
        loss_batch = to_loss_batch(batch.to(device), bare_agent)  # converted once: the bare baseline
        if learner.flags.compile or learner.flags.cudagraph:
            stepper.warmup(loss_batch)
        bare_ms = time_updates(lambda: stepper.step(None, loss_batch), args.updates)
        rows.append((learner.flags, app_ms, bare_ms))
        print(f"{learner.flags}: app {app_ms:.0f} ms/update, bare stepper {bare_ms:.0f} ms/update", flush=True)
    params = count_parameters(agent)["total"]
    print(f"\nworld_model={args.size} ({params:,} parameters), pixels 64x64, B{args.batch} x T{args.length}, "
          f"device {device}, {torch.get_num_threads()} threads, {args.updates} timed updates per row\n")
    print("| learner | app ms/update | app updates/s | bare stepper ms/update | app / bare |")
    print("|---|---|---|---|---|")
    for flags, app_ms, bare_ms in rows:
        name = ("compiled" if flags.compile else "eager") + (" + cudagraph" if flags.cudagraph else "") + \
               (" bf16" if flags.bf16 else " fp32")
        print(f"| {name} | {app_ms:.0f} | {1000 / app_ms:.2f} | {bare_ms:.0f} | {app_ms / bare_ms:.2f} |")


if __name__ == "__main__":
    main()
