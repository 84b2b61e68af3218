"""Returns against env steps in the official DreamerV3 score-file format, and comparisons with it.

The official score files (github.com/danijar/dreamerv3, scores/) hold one record per task and seed:
{"task": "dmc_walker_walk", "method": "dreamerv3", "seed": "0", "xs": [env steps], "ys": [returns]}.
Every run writes <run dir>/scores.json: such records for its eval and training-episode returns
(an extra "split" field says which). xs count env frames (agent steps x env.action_repeat), the unit
of the published budgets (e.g. DMC Vision at 1M frames).
"""
from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

from dreamer.io.disk import writing
from dreamer.io.metrics import read_metrics

METHOD = "dreamer-app"


def run_records(run_dir: str | Path, task: str, seed: int, action_repeat: int) -> list[dict]:
    run_dir = Path(run_dir)
    records = []
    metrics = run_dir / "metrics.jsonl"
    evals = [r for r in read_metrics(metrics) if r.get("eval/return") is not None] if metrics.exists() else []
    episodes_path = run_dir / "episodes.jsonl"
    episodes = read_metrics(episodes_path) if episodes_path.exists() else []
    points = {}  # evals: one point per step (the last wins), in step order
    for row in evals:
        points[row["step"] * action_repeat] = row["eval/return"]
    xs = sorted(points)
    records.append({"task": task, "method": METHOD, "seed": str(seed), "split": "eval",
                    "xs": xs, "ys": [points[x] for x in xs]})
    # training episodes: every one, in step order; envs that end episodes together share a step
    # (the official scores.jsonl has a line per episode too, and its plot.py averages them per bin)
    episodes = sorted(episodes, key=lambda row: row["step"])
    records.append({"task": task, "method": METHOD, "seed": str(seed), "split": "train",
                    "xs": [row["step"] * action_repeat for row in episodes], "ys": [row["return"] for row in episodes]})
    return records


def write_scores(run_dir: str | Path, task: str, seed: int, action_repeat: int) -> Path:
    path = Path(run_dir) / "scores.json"
    tmp = path.with_suffix(".json.tmp")
    try:
        with writing(path):
            tmp.write_text(json.dumps(run_records(run_dir, task, seed, action_repeat)))
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load_records(path: str | Path) -> list[dict]:
    """A score file: a JSON list of records, optionally gzipped (as the official files are)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        records = json.load(f)
    if isinstance(records, dict):
        records = [records]
    for r in records:
        if not {"xs", "ys"} <= set(r) or len(r["xs"]) != len(r["ys"]):
            raise ValueError(f"{path}: each record needs xs and ys of equal length")
    return records


def value_at(xs: list[float], ys: list[float], x: float, interpolate: bool) -> float:
    """The curve at x: interpolated (reference curves) or the latest point at or before x (our evals)."""
    if not xs or x < xs[0]:
        return math.nan
    if x >= xs[-1]:
        return ys[-1] if not interpolate or x == xs[-1] else math.nan
    for (x0, y0), (x1, y1) in zip(zip(xs, ys), zip(xs[1:], ys[1:])):
        if x0 <= x <= x1:
            if not interpolate:
                return y1 if x == x1 else y0
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0) if x1 > x0 else y1
    return math.nan


def reference_names(task: str) -> set[str]:
    """Names a reference file may give our task: the official atari100k score file names its
    tasks atari_<game> (the config's task is atari100k_<game>, which our scores.json keeps)."""
    if task.startswith("atari100k_"):
        return {task, "atari_" + task[len("atari100k_"):]}
    return {task}


def compare(run_dir: str | Path, reference: str | Path, budgets: list[int] | None = None) -> str:
    """Markdown: our eval return beside the reference's mean (and seed range) at matching budgets."""
    ours = json.loads((Path(run_dir) / "scores.json").read_text())
    ours_eval = next(r for r in ours if r.get("split") == "eval")
    names = reference_names(ours_eval["task"])
    refs = [r for r in load_records(reference) if r.get("task", ours_eval["task"]) in names]
    if not refs:
        raise ValueError(f"{reference} has no record for task {ours_eval['task']}")
    if budgets is None:  # our eval points, up to where the reference ends
        end = max(r["xs"][-1] for r in refs)
        budgets = [x for x in ours_eval["xs"] if x <= end]
    method = refs[0].get("method", "reference")
    lines = [f"{ours_eval['task']}: {METHOD} (seed {ours_eval['seed']}) vs {method} ({len(refs)} seed(s)), "
             "env frames", "",
             f"| env frames | {METHOD} eval return | {method} mean | {method} min-max |", "|---|---|---|---|"]
    for x in budgets:
        mine = value_at(ours_eval["xs"], ours_eval["ys"], x, interpolate=False)
        theirs = [v for v in (value_at(r["xs"], r["ys"], x, interpolate=True) for r in refs) if math.isfinite(v)]
        ref = f"{sum(theirs) / len(theirs):.1f} | {min(theirs):.1f}-{max(theirs):.1f}" if theirs else "n/a | n/a"
        lines.append(f"| {x:,} | {mine:.1f} | {ref} |" if math.isfinite(mine) else f"| {x:,} | n/a | {ref} |")
    return "\n".join(lines)
