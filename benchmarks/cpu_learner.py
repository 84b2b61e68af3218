"""CPU learner paths: eager vs `learner.compile=regional` (patches/regional.py), cold and warm cache.

    python -m benchmarks.cpu_learner [--shapes tiny:proprio:32,tiny:proprio:64,s:proprio:64,s:pixels:64] [--updates 10]
                                     [--official /tmp/official/venv/bin/python]

Each row runs in fresh processes (the official learner defaults, REINFORCE actor, B16): eager;
regional with an empty inductor cache and no precompiled headers (cold, as on a fresh machine:
the first update compiles); regional again with what the cold run left (warm). On an AMD CPU with
AVX-512 also eager with MKL's own kernel choice (DREAMER_MKL_AMD=0: its AVX2 code, as stock
PyTorch runs there; patches/mkl_amd.py). Per row: ms/update after the first update, and the first
update's seconds. Proprio: 5-dim observation, 1-dim action (cartpole); pixels: 64x64, 6-dim action.
With --official (the python of scripts/official_venv.sh), each row also runs the official
DreamerV3 learner at the same shapes (benchmarks/official_learner.py, given the preset's
dimensions), in the same run: the same parameter count with proprio; with pixels its image decoder
has a stochastic-latent path torchrl's lacks (the counts are printed).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from patches import mkl_amd

ROOT = Path(__file__).resolve().parents[1]


def one(size: str, obs: str, length: int, mode: str, updates: int) -> dict:
    import torch  # after dreamer (benchmarks/__init__.py): patches/mkl_amd.py acts before torch loads
    from hydra import compose, initialize_config_dir
    from tensordict import TensorDict

    from dreamer.agent.learner import Learner
    from dreamer.agent.model import build_agent
    from dreamer.agent.obs import ObsSpec
    from dreamer.config import register_configs, validate
    from replay.records import ContextSpec

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = validate(compose(config_name="config", overrides=[f"world_model={size}", f"learner.compile={mode}"]))
    spec = ObsSpec.from_env(obs, 64, vector_dim=5)
    action_dim = 6 if obs == "pixels" else 1
    torch.manual_seed(0)
    agent = build_agent(cfg.world_model, cfg.learner, spec, action_dim, "cpu")
    wm = cfg.world_model
    learner = Learner(agent, cfg.learner, ContextSpec(wm.stoch, wm.classes, wm.deter))
    B, L = 16, length + 1
    g = torch.Generator().manual_seed(0)
    data = {"action": torch.rand(B, L, action_dim, generator=g) * 2 - 1,
            "is_init": torch.zeros(B, L, 1, dtype=torch.bool),
            "next": {"reward": torch.rand(B, L, 1, generator=g), "done": torch.zeros(B, L, 1, dtype=torch.bool),
                     "terminated": torch.zeros(B, L, 1, dtype=torch.bool)},
            "replay_context": {"state": torch.zeros(B, L, wm.stoch, dtype=torch.uint8),
                               "belief": torch.zeros(B, L, wm.deter, dtype=torch.float16)}}
    if obs == "pixels":
        data["pixels"] = torch.randint(0, 256, (B, L, 3, 64, 64), dtype=torch.uint8, generator=g)
    else:
        data["observation"] = torch.randn(B, L, 5, generator=g)
    batch = TensorDict(data, [B, L])
    start = time.perf_counter()
    learner.step(batch)
    first = time.perf_counter() - start
    learner.step(batch)
    start = time.perf_counter()
    for _ in range(updates):
        learner.step(batch)
    trained = {id(p): p.numel() for group in agent.optimizer.param_groups for p in group["params"]}
    return {"first_s": first, "ms": 1000 * (time.perf_counter() - start) / updates,
            "flags": learner.flags.describe(), "threads": torch.get_num_threads(), "params": sum(trained.values()),
            "mkl": mkl_amd.STATUS}


def run(size: str, obs: str, length: int, mode: str, updates: int, cache: str, mkl_amd_fix: bool = True) -> dict:
    # TMPDIR too: inductor keeps its precompiled C++ headers under the system temp dir, outside
    # TORCHINDUCTOR_CACHE_DIR; a cold run builds them as on a fresh machine (measured ~5 s)
    tmp = Path(cache) / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache, "TMPDIR": str(tmp),
           **({} if mkl_amd_fix else {mkl_amd.ENV_VAR: "0"})}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.cpu_learner", "--one", size, obs, str(length), mode,
                           "--updates", str(updates)], cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{size} {obs} T{length} {mode}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


OFFICIAL_DIMS = ("deter", "hidden", "stoch", "classes", "blocks", "mlp_units", "mlp_layers", "head_layers",
                 "policy_layers")


def preset_dims(size: str, obs: str = "proprio") -> dict:
    """The dimensions of conf/world_model/<size>.yaml (over the schema's defaults) that
    benchmarks/official_learner.py maps to its keys."""
    import dataclasses

    import yaml

    from dreamer.config import WorldModelConfig

    preset = {**dataclasses.asdict(WorldModelConfig()),
              **(yaml.safe_load((ROOT / "conf" / "world_model" / f"{size}.yaml").read_text()) or {})}
    return {key: preset[key] for key in OFFICIAL_DIMS + (("cnn_depth", "cnn_mults") if obs == "pixels" else ())}


def run_official(python: str, src: str | None, size: str, obs: str, length: int, updates: int, cache: str) -> dict:
    env = {**os.environ, "TMPDIR": cache, **({"OFFICIAL_SRC": src} if src else {})}
    proc = subprocess.run([python, str(ROOT / "benchmarks" / "official_learner.py"), "--length", str(length),
                           "--updates", str(updates), "--obs", obs, "--dims", json.dumps(preset_dims(size, obs))],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"official T{length}: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="tiny:proprio:32,tiny:proprio:64,s:proprio:64,s:pixels:64")
    parser.add_argument("--updates", type=int, default=10, help="timed updates per tiny row (larger sizes: a third)")
    parser.add_argument("--official", metavar="PYTHON", help="the official DreamerV3's python "
                        "(scripts/official_venv.sh): adds its learner to every row")
    parser.add_argument("--official-src", help="its checkout (default $OFFICIAL_SRC or /tmp/official/src)")
    parser.add_argument("--one", nargs=4, metavar=("SIZE", "OBS", "T", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.official and not os.access(args.official, os.X_OK):
        parser.error(f"--official {args.official}: no python there (scripts/official_venv.sh makes one)")
    if args.one:
        size, obs, length, mode = args.one
        print(json.dumps(one(size, obs, int(length), mode, args.updates)))
        return
    rows = []
    for shape in args.shapes.split(","):
        size, obs, length = shape.split(":")
        updates = args.updates if size == "tiny" else max(1, args.updates // 3)  # larger sizes: seconds each
        with tempfile.TemporaryDirectory(prefix="inductor_") as cache:
            stock = (run(size, obs, int(length), "false", updates, cache, mkl_amd_fix=False)
                     if mkl_amd.STATUS == mkl_amd.ACTIVE else None)  # else eager already runs MKL's choice
            eager = run(size, obs, int(length), "false", updates, cache)
            cold = run(size, obs, int(length), "regional", updates, cache)
            warm = run(size, obs, int(length), "regional", updates, cache)
            official = (run_official(args.official, args.official_src, size, obs, int(length), updates, cache)
                        if args.official else None)
        rows.append((shape, stock, eager, cold, warm, official))
        print(f"{shape}: " + (f"eager with MKL's default kernels {stock['ms']:.0f} ms, " if stock else "")
              + f"eager {eager['ms']:.0f} ms, regional {warm['ms']:.0f} ms "
              f"(first update cold {cold['first_s']:.1f} s, warm {warm['first_s']:.1f} s)"
              + (f"; official {official['ms']:.0f} ms (first update {official['first_s']:.1f} s)" if official else ""),
              flush=True)
    print(f"\nCPU learner, B16, official learner defaults, {rows[0][2]['threads']} threads; fresh processes per cell; "
          f"{rows[0][2]['mkl'] or 'MKL as shipped'}\n")
    print("| shape | eager, MKL's default kernels ms/update | eager ms/update "
          "| regional ms/update (cold run, warm run) | speed-up (first column / slower regional) "
          "| first update eager s | first update regional cold s | warm s |"
          + (" official ms/update | regional / official | official first update s |" if args.official else ""))
    print("|---|---|---|---|---|---|---|---|" + ("---|---|---|" if args.official else ""))
    for shape, stock, eager, cold, warm, official in rows:
        size, obs, length = shape.split(":")
        slower = max(cold["ms"], warm["ms"])
        line = (f"| {size} T{length} {obs} | {(stock or eager)['ms']:.0f} | {eager['ms']:.0f} | {cold['ms']:.0f}, "
                f"{warm['ms']:.0f} | {(stock or eager)['ms'] / slower:.2f}x | {eager['first_s']:.1f} "
                f"| {cold['first_s']:.1f} | {warm['first_s']:.1f} |")
        if args.official:
            line += (f" {official['ms']:.0f} | {slower / official['ms']:.2f}x | {official['first_s']:.1f} |"
                     if official else " - | - | - |")
        print(line)
    for shape, _, eager, _, _, official in rows:
        if official:
            print(f"\n{shape}: {eager['params']:,} trained parameters here, {official['params']:,} in the official "
                  f"(jax {official['jax']}, {official['threads']} threads)")


if __name__ == "__main__":
    main()
