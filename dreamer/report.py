"""Sweep summaries: one row per job of a `train.py -m ...` multirun.

    python -m dreamer.report SWEEP_DIR
    python -m dreamer.report compare RUN_DIR REFERENCE.json[.gz] [--budgets 100000,500000]
    python -m dreamer.report plot RUN_DIR... [--reference SCORE_FILE] [--split eval|train] [--out curves.png]

`compare` prints a run's eval curve (its scores.json) beside a reference score file in the official
DreamerV3 format (dreamer/io/scores.py) at matching env-frame budgets. `plot` draws runs (seeds) of one
task as their median and range beside a reference's median and band (dreamer/io/curves.py).

Runs by itself at the end of every multirun (the `SweepSummary` Hydra callback in conf/config.yaml).
Writes SWEEP_DIR/summary.{md,json,png}, prints the Markdown table and, when the runs log to wandb,
logs the table and plot as a "sweep-summary" run in the sweep's wandb group.

Throughput is measured over a steady-state window: from the second metrics row after learning has
begun (prefill and the first, compiled or cold, update lie before it) to the last row before the
env-step budget was reached (after it the workers are stopping).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from dreamer.io import scores
from dreamer.io.metrics import read_metrics, sweep_group_name

COLUMNS = {  # summary key -> table header
    "env_steps_per_s": "env steps/s",
    "updates_per_s": "updates/s",
    "driver_cpu_ms_per_step": "driver CPU ms/step",
    "peak_tree_rss_mb": "peak RSS, all processes (MB)",
    "final_eval_return": "final eval return",
    "best_eval_return": "best eval return",
}


def job_dirs(sweep_dir: Path) -> list[Path]:
    """Job dirs of a sweep (Hydra names them by job number), in job order."""
    jobs = [p.parent for p in sweep_dir.glob("*/metrics.jsonl")]
    return sorted(jobs, key=lambda p: (int(p.name) if p.name.isdigit() else 1 << 30, p.name))


def job_overrides(job_dir: Path) -> dict[str, str]:
    path = job_dir / ".hydra" / "overrides.yaml"
    items = yaml.safe_load(path.read_text()) if path.exists() else []
    return dict(item.split("=", 1) for item in items or [] if "=" in item)


def total_frames(job_dir: Path) -> int | None:
    path = job_dir / ".hydra" / "config.yaml"
    if not path.exists():
        return None
    return yaml.safe_load(path.read_text())["collector"]["total_frames"]


def summarize(rows: list[dict], budget: int | None = None) -> dict:
    """Steady-state throughput, peak memory and eval returns of one run's metrics rows."""
    timed = [r for r in rows if "time/elapsed_s" in r and "train/updates" in r]
    learning = [r for r in timed if r["train/updates"] > 0]
    # From the second learning row: the first one closes the window holding prefill's end and the
    # first (compiled / cold) update.
    window = [r for r in learning[1:] if budget is None or r["step"] < budget]
    if len(window) < 2:  # too short for a steady window: every learning row, else every timed row
        window = learning if len(learning) >= 2 else timed
    out: dict = {"window_steps": None}
    if len(window) >= 2:
        first, last = window[0], window[-1]
        seconds = last["time/elapsed_s"] - first["time/elapsed_s"]
        out["window_steps"] = [first["step"], last["step"]]
        out["env_steps_per_s"] = (last["step"] - first["step"]) / seconds if seconds > 0 else math.nan
        out["updates_per_s"] = (last["train/updates"] - first["train/updates"]) / seconds if seconds > 0 else math.nan
        cpu = [(r["collect/driver_cpu_ms_per_step"], r["step"] - prev["step"])
               for prev, r in zip(window, window[1:]) if "collect/driver_cpu_ms_per_step" in r]
        steps = sum(n for _, n in cpu)
        out["driver_cpu_ms_per_step"] = sum(ms * n for ms, n in cpu) / steps if steps else math.nan
    memory = [r["system/tree_rss_mb"] for r in rows if "system/tree_rss_mb" in r]
    out["peak_tree_rss_mb"] = max(memory) if memory else math.nan
    evals = [r["eval/return"] for r in rows if r.get("eval/return") is not None]
    out["final_eval_return"] = evals[-1] if evals else math.nan
    out["best_eval_return"] = max(evals) if evals else math.nan
    return out


def sweep_summary(sweep_dir: str | Path) -> dict:
    """{"swept": [keys], "jobs": [{"dir", "values": {key: value}, **summary}]}."""
    sweep_dir = Path(sweep_dir)
    jobs = job_dirs(sweep_dir)
    if not jobs:
        raise FileNotFoundError(f"no job with a metrics.jsonl under {sweep_dir}")
    overrides = [job_overrides(j) for j in jobs]
    keys = sorted({k for o in overrides for k in o})
    swept = [k for k in keys if len({o.get(k) for o in overrides}) > 1] or keys
    return {"swept": swept, "jobs": [
        {"dir": job.name, "values": {k: o.get(k) for k in swept},
         **summarize(read_metrics(job / "metrics.jsonl"), total_frames(job))}
        for job, o in zip(jobs, overrides)]}


def _fmt(value) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "n/a"
    return f"{value:,.1f}" if abs(value) >= 10 else f"{value:.3g}"


def markdown(summary: dict) -> str:
    swept = summary["swept"]
    lines = ["| job | " + " | ".join(swept + list(COLUMNS.values())) + " | steady window (env steps) |",
             "|" + "---|" * (len(swept) + len(COLUMNS) + 2)]
    for job in summary["jobs"]:
        window = job["window_steps"]
        cells = [job["dir"]] + [str(job["values"][k]) for k in swept] + [_fmt(job.get(k)) for k in COLUMNS]
        cells.append(f"{window[0]}-{window[1]}" if window else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(summary: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [",".join(str(v) for v in job["values"].values()) for job in summary["jobs"]]
    fig, axes = plt.subplots(1, len(COLUMNS), figsize=(3.2 * len(COLUMNS), 3.2))
    for ax, (key, title) in zip(axes, COLUMNS.items()):
        values = [job.get(key, math.nan) for job in summary["jobs"]]
        ax.bar(range(len(labels)), [v if math.isfinite(v) else 0.0 for v in values], color="tab:blue")
        ax.set_xticks(range(len(labels)), labels, rotation=45, fontsize=8)
        ax.set_title(title, fontsize=9)
    fig.supxlabel(", ".join(summary["swept"]), fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(sweep_dir: str | Path) -> tuple[dict, str]:
    sweep_dir = Path(sweep_dir)
    summary = sweep_summary(sweep_dir)
    table = markdown(summary)
    (sweep_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    (sweep_dir / "summary.md").write_text(table + "\n")
    plot(summary, sweep_dir / "summary.png")
    return summary, table


def log_to_wandb(summary: dict, sweep_dir: Path, logger_cfg, group: str) -> None:
    import wandb

    columns = summary["swept"] + list(COLUMNS)
    data = [[str(job["values"][k]) for k in summary["swept"]] + [job.get(k, math.nan) for k in COLUMNS]
            for job in summary["jobs"]]
    run = wandb.init(project=logger_cfg.project, dir=str(sweep_dir), mode=logger_cfg.mode, group=group,
                     job_type="sweep-summary", name=f"summary-{group}")
    run.log({"sweep/summary": wandb.Table(columns=columns, data=data),
             "sweep/plot": wandb.Image(str(sweep_dir / "summary.png"))})
    run.finish()
    wandb.teardown()


class SweepSummary(Callback):
    """Hydra callback: the summary table after every multirun (conf/config.yaml, hydra.callbacks)."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        try:
            summary, table = write_report(sweep_dir)
        except FileNotFoundError as err:  # every job failed before logging
            print(f"sweep summary: {err}", file=sys.stderr)
            return
        logger = config.logger
        if "wandb" in logger.backends and logger.mode != "disabled":
            log_to_wandb(summary, sweep_dir, logger, logger.group or sweep_group_name(sweep_dir))
        print(f"\nsweep summary ({sweep_dir}/summary.md, summary.png):\n{table}")


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "compare":
        return compare_main(argv[1:])
    if argv and argv[0] == "plot":
        return plot_main(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep_dir", type=Path)
    args = parser.parse_args(argv)
    try:
        _, table = write_report(args.sweep_dir)
    except FileNotFoundError as err:
        sys.exit(f"error: {err}")
    print(table)


def compare_main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m dreamer.report compare",
                                     description="A run's eval returns beside a reference score file.")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("reference", type=Path, help="official-format score file (.json or .json.gz)")
    parser.add_argument("--budgets", help="comma-separated env-frame budgets (default: the run's eval points)")
    args = parser.parse_args(argv)
    budgets = [int(float(b)) for b in args.budgets.split(",")] if args.budgets else None
    try:
        print(scores.compare(args.run_dir, args.reference, budgets))
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"error: {err}")


def plot_main(argv: list[str]) -> None:
    from dreamer.io import curves

    parser = argparse.ArgumentParser(prog="python -m dreamer.report plot", description=curves.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dirs", type=Path, nargs="+", help="runs (seeds) of one task")
    parser.add_argument("--reference", type=Path, help="official-format score file (.json or .json.gz)")
    parser.add_argument("--split", choices=("eval", "train"), default="eval")
    parser.add_argument("--out", type=Path, default=Path("curves.png"))
    args = parser.parse_args(argv)
    try:
        series = curves.plot(args.run_dirs, args.out, args.reference, args.split)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(f"error: {err}")
    print(f"{args.out}: {series} series ({len(args.run_dirs)} run(s)"
          f"{', and the reference' if args.reference else ''})")


if __name__ == "__main__":
    main()
