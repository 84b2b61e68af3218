"""Learning benchmark: train a preset over several seeds and compare with random and published returns.

    python -m benchmarks.learning [--preset learn_cpu] [--seeds 0,1,2] [--parallel N] [--random-episodes 20]
                                  [overrides ...]

Runs `python train.py experiment=<preset> seed=<s>` once per seed, one after another or --parallel N
at a time, each on its own cores as `benchmarks.suite` runs them (benchmarks/jobs.py), reads each
run's scores.json (eval and training-episode returns against env frames) and prints a table: task,
budget, each seed's final eval return, the median, the uniform-random policy's mean return in the
same env (measured here, any suite), and the published official DreamerV3 median at the same env
frames (benchmarks/reference/<suite>_<task>.json, read from the official score files) where one is
checked in. The official score files hold training-episode returns binned by the official plot.py
(the mean of the episodes in each 10,000-frame bin, plotted at the bin's end), not evals; a second
row measures our runs that way: each seed's mean training-episode return over the last bin before
the budget. Curves go to <out>/curves.json and curves.png.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

from benchmarks.jobs import Job, run_jobs, stop_on_sigterm

ROOT = Path(__file__).resolve().parents[1]

REFERENCE_DIR = ROOT / "benchmarks" / "reference"  # official DreamerV3 curves (small JSON, source inside)


def reference_at(suite: str, task: str, frames: int) -> dict | None:
    """The official DreamerV3 median (and min, max over seeds) at `frames` env frames, each seed's
    curve linearly interpolated there; None without a reference file for the task."""
    import numpy as np

    path = REFERENCE_DIR / f"{suite}_{task}.json"
    if not path.exists():
        return None
    ref = json.loads(path.read_text())
    values = [float(np.interp(frames, r["xs"], r["ys"])) for r in ref["records"]]
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "seeds": len(values), "source": ref["source"]}


def reference_bin(suite: str, task: str) -> int | None:
    """The width in env frames of the reference curve's bins (the spacing of its points)."""
    path = REFERENCE_DIR / f"{suite}_{task}.json"
    if not path.exists():
        return None
    xs = json.loads(path.read_text())["records"][0]["xs"]
    return int(xs[1] - xs[0])


def bin_mean(xs: list, ys: list, end: int, width: int) -> float | None:
    """Mean return of the training episodes that ended in (end - width, end] env frames (the official
    plot.py's bin that is plotted at `end`; its numpy bins are [start, end), but our runs stop at
    the budget, and their last episodes end exactly there); None without any."""
    inside = [y for x, y in zip(xs, ys) if end - width < x <= end]
    return statistics.mean(inside) if inside else None


def preset_env(preset: str, overrides: list[str]):
    """The EnvConfig the preset trains on (after env.* overrides)."""
    import dataclasses

    from dreamer.config import EnvConfig

    exp = yaml.safe_load((ROOT / "conf" / "experiment" / f"{preset}.yaml").read_text())
    env_name = next((d["override /env"] for d in exp.get("defaults", []) if isinstance(d, dict)
                     and "override /env" in d), "dmc_walker_walk")
    env = yaml.safe_load((ROOT / "conf" / "env" / f"{env_name}.yaml").read_text()) or {}  # {}: the schema's
    env.update(exp.get("env", {}))
    for item in overrides:
        key, _, value = item.partition("=")
        if key.startswith("env."):
            env[key[4:]] = yaml.safe_load(value)
    fields = {f.name for f in dataclasses.fields(EnvConfig)}
    env = {k: v for k, v in env.items() if k in fields and not (isinstance(v, str) and v.startswith("${"))}
    return EnvConfig(**env)


def reference_suite(env) -> str:
    """The official score files' suite name for this env (dmc_proprio / dmc_vision split DMC)."""
    if env.suite == "dmc":
        return "dmc_proprio" if env.obs == "proprio" else "dmc_vision"
    return env.suite


def random_return(env_cfg, episodes: int) -> tuple[float, float]:
    """Mean and std of the return of uniform random actions (the prefill policy), in the app's env."""
    import dataclasses

    import numpy as np
    import torch

    from collectors.envs import make_env
    from collectors.specs import env_spec

    cfg = dataclasses.asdict(env_cfg)
    limit = env_spec(cfg).max_steps
    returns = []
    for seed in range(episodes):
        torch.manual_seed(seed)
        env = make_env(cfg, seed=10_000 + seed)
        td, total = env.reset(), 0.0
        for _ in range(limit):
            td = env.rand_step(td)
            total += float(td["next", "reward"])
            if td["next", "done"].item():
                break
            td = td["next"]
        env.close()
        returns.append(total)
    return float(np.mean(returns)), float(np.std(returns))


def seed_command(preset: str, seed: int, run_dir: Path, overrides: list[str]) -> list[str]:
    return [sys.executable, "train.py", f"experiment={preset}", f"seed={seed}", "logger.mode=offline",
            f"hydra.run.dir={run_dir}", *overrides]


def train_seeds(preset: str, seeds: list[int], out: Path, overrides: list[str], parallel: int) -> dict:
    """Runs the seeds, `parallel` at a time, each on its own cores as the suite does (benchmarks.jobs);
    {seed: eval curve, training-episode curve and seconds}."""
    curves = {}

    def done(job: Job) -> None:
        records = json.loads((job.run_dir / "scores.json").read_text())
        curve = next(r for r in records if r["split"] == "eval")
        train = next((r for r in records if r["split"] == "train"), {"xs": [], "ys": []})
        seconds = time.monotonic() - job.start
        print(f"  seed {job.seed}: final eval return {curve['ys'][-1]:.1f} at {curve['xs'][-1]:,} frames "
              f"(best {max(curve['ys']):.1f}; {seconds:.0f} s)", flush=True)
        curves[job.seed] = {"xs": curve["xs"], "ys": curve["ys"], "seconds": seconds,
                            "train": {"xs": train["xs"], "ys": train["ys"]}}

    jobs = [Job(preset, seed, [seed_command(preset, seed, out / f"seed{seed}", overrides)], out / f"seed{seed}")
            for seed in seeds]
    try:  # on any exit the running seeds write their checkpoints and stop (run_jobs)
        run_jobs(jobs, parallel, done=done, pin=True)
    except RuntimeError as failed:
        sys.exit(str(failed))
    return dict(sorted(curves.items()))


def plot(curves: dict, random_mean: float, title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for seed, c in curves.items():
        ax.plot(c["xs"], c["ys"], marker="o", label=f"seed {seed}")
    ax.axhline(random_mean, color="gray", linestyle="--", label="uniform random")
    ax.set_xlabel("env frames")
    ax.set_ylabel("eval return")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="learn_cpu")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--parallel", type=int, default=1, help="seeds trained at once")
    parser.add_argument("--random-episodes", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("overrides", nargs="*", help="extra train.py overrides")
    args = parser.parse_args(argv)
    stop_on_sigterm()
    if args.parallel < 1:
        parser.error(f"--parallel must be >= 1 (got {args.parallel})")
    out = args.out or ROOT / "outputs" / f"learning-{args.preset}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    env = preset_env(args.preset, args.overrides)
    name, suite = env.name, reference_suite(env)
    rand_mean, rand_std = random_return(env, args.random_episodes)
    print(f"uniform random policy on {name} (action repeat {env.action_repeat}): {rand_mean:.1f} +- {rand_std:.1f} "
          f"over {args.random_episodes} episodes", flush=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    curves = train_seeds(args.preset, seeds, out, args.overrides, args.parallel)
    finals = [c["ys"][-1] for c in curves.values()]
    frames = min(c["xs"][-1] for c in curves.values())
    task = name.split("_", 1)[1]
    ref, width = reference_at(suite, task, frames), reference_bin(suite, task)
    binned = [bin_mean(c["train"]["xs"], c["train"]["ys"], frames, width) for c in curves.values()] if width else []
    (out / "curves.json").write_text(json.dumps({"task": name, "preset": args.preset, "random_mean": rand_mean,
                                                 "random_std": rand_std, "reference": ref, "curves": curves},
                                                indent=2))
    plot(curves, rand_mean, f"{args.preset}: {name}", out / "curves.png")
    print(f"\ncurves: {out / 'curves.json'}, {out / 'curves.png'}\n")
    print(format_table(name, frames, finals, rand_mean, ref, binned, width))


def format_table(name: str, frames: int, finals: list[float], rand_mean: float, ref: dict | None,
                 binned: list[float | None] = (), width: int | None = None) -> str:
    official = (f"{ref['median']:.1f} ({ref['min']:.0f}-{ref['max']:.0f}, {ref['seeds']} seeds)" if ref
                else "no reference file")
    rows = ["| task | env frames | our measure | seed returns | median | random policy | median / random "
            "| official DreamerV3 median (min-max) | median / official |",
            "|---|---|---|---|---|---|---|---|---|"]
    measures = [("final eval", finals)]
    bin_name = f"training episodes in ({frames - width:,}, {frames:,}]" if width else ""
    if binned and None not in binned:
        measures.append((f"{bin_name} (the score files' measure)", binned))
    for measure, returns in measures:
        median = statistics.median(returns)
        ratio = f"{median / rand_mean:.2f}x" if rand_mean else "-"
        versus = f"{median / ref['median']:.2f}x" if ref else "-"
        rows.append(f"| {name} | {frames:,} | {measure} | {', '.join(f'{r:.0f}' for r in returns)} | {median:.1f} "
                    f"| {rand_mean:.1f} | {ratio} | {official} | {versus} |")
    if binned and None in binned:  # say why the second row is missing
        rows.append(f"\nno {bin_name} in {binned.count(None)} of {len(binned)} seeds: the score files' "
                    "measure is left out")
    if ref:
        rows.append(f"\nofficial: {ref['source']} (training episodes, binned), each seed interpolated at "
                    f"{frames:,} env frames")
    return "\n".join(rows)


if __name__ == "__main__":
    main()
