"""Learning curves as pictures: returns against env frames, several runs (seeds) as their median and
range, beside a reference's median and min-max band (an official DreamerV3 score file).

    python -m dreamer.report plot RUN_DIR [RUN_DIR ...] [--reference SCORE_FILE] [--split eval|train]
                                  [--out curves.png]

A run's curve comes from its scores.json (written at the end of every run, dreamer/io/scores.py); the
runs are drawn on the env frames where they all have a point (a run's curve linearly interpolated
between its points). The reference file may hold several tasks: the runs' task is taken.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from dreamer.io import scores


def run_curve(run_dir: Path, split: str = "eval") -> dict:
    """{"task", "xs", "ys"} of one run's split ("eval": evaluation returns, "train": training episodes)."""
    path = Path(run_dir) / "scores.json"
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing (every finished run writes it)")
    record = next((r for r in json.loads(path.read_text()) if r.get("split") == split), None)
    if record is None or not record["xs"]:
        raise ValueError(f"{path} has no {split} returns")
    return {"task": record["task"], "xs": record["xs"], "ys": record["ys"]}


def band(curves: list[dict], points: int = 50) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(xs, median, min, max) over the curves, on the frames all of them cover."""
    start = max(c["xs"][0] for c in curves)
    end = min(c["xs"][-1] for c in curves)
    xs = np.array(sorted({x for c in curves for x in c["xs"] if start <= x <= end}), dtype=float)
    if len(xs) > points:  # a dense set (training episodes): an even grid
        xs = np.linspace(start, end, points)
    ys = np.stack([np.interp(xs, c["xs"], c["ys"]) for c in curves])
    return xs, np.median(ys, 0), ys.min(0), ys.max(0)


def reference_curves(path: Path, task: str) -> list[dict]:
    """The reference file's seeds for `task`: an official score file (a list of records, .json or
    .json.gz), or benchmarks/reference's {"records": [...]} form."""
    data = json.loads(path.read_text()) if path.suffix == ".json" else None
    records = data["records"] if isinstance(data, dict) and "records" in data else scores.load_records(path)
    mine = [r for r in records if r.get("task", task) == task]
    return [{"xs": r["xs"], "ys": r["ys"]} for r in (mine or records)]


def draw(ax, runs: list[dict], reference: list[dict] | None = None, label: str = "dreamer-app") -> int:
    """Draws the runs' median and range, and the reference's; returns the number of series drawn."""
    series = 0
    if reference:  # over the runs' frames only: a reference trained 10x longer would flatten them
        end = max(r["xs"][-1] for r in runs)
        reference = [{"xs": [x for x in r["xs"] if x <= end] + [end],
                      "ys": [y for x, y in zip(r["xs"], r["ys"]) if x <= end] + [float(np.interp(end, r["xs"], r["ys"]))]}
                     for r in reference]
        xs, median, low, high = band(reference)
        ax.fill_between(xs, low, high, color="tab:gray", alpha=0.25, linewidth=0)
        ax.plot(xs, median, color="tab:gray", linestyle="--", label=f"reference: median of {len(reference)}")
        series += 1
    xs, median, low, high = band(runs)
    if len(runs) > 1:
        ax.fill_between(xs, low, high, color="tab:blue", alpha=0.25, linewidth=0)
    ax.plot(xs, median, color="tab:blue", marker="." if len(xs) < 30 else None,
            label=f"{label}: median of {len(runs)}" if len(runs) > 1 else label)
    series += 1
    ax.set_xlabel("env frames")
    ax.set_ylabel("return")
    ax.grid(alpha=0.3)
    return series


def plot(run_dirs: list[Path], out: Path, reference: Path | None = None, split: str = "eval") -> int:
    """Writes the PNG; returns the number of series (runs' median, reference) drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [run_curve(d, split) for d in run_dirs]
    tasks = sorted({r["task"] for r in runs})
    if len(tasks) > 1:
        raise ValueError(f"the runs are of different tasks ({', '.join(tasks)}): plot one task at a time")
    ref = reference_curves(reference, tasks[0]) if reference else None
    fig, ax = plt.subplots(figsize=(6, 4))
    series = draw(ax, runs, ref)
    ax.set_title(f"{tasks[0]} ({split} returns)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return series
