"""The development suite's outputs (benchmarks/suite.py runs it): its table, its curves, and the time
its runs and invocations took."""
from __future__ import annotations

import json
import statistics
from pathlib import Path


def num(x: float) -> str:
    """A return as the table shows it: one decimal, or three significant digits below 10 (MiniGrid's 0.955)."""
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3g}"


def format_table(rows: list[dict], seeds: int, eval_episodes: int, hours: float, invocations: int = 1) -> str:
    lines = [f"experiment=cpu, {seeds} seed(s); ours: the final checkpoint's mean return over {eval_episodes} "
             "episodes with the policy's mode, the median (min-max) over seeds; normalised = (ours - random) / "
             "(reference - random); sampled actions: the same checkpoints acting as the official agent does",
             "",
             "| task | env frames | random policy | ours: median (min-max) | reference | normalised: median (min-max) "
             "| sampled actions: median (normalised) | run minutes (sum over seeds) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ref = r["reference"]
        norm = f"**{r['normalised']:.2f}** ({r['normalised_min']:.2f} to {r['normalised_max']:.2f})" if ref else "-"
        sampled = num(r["sampled_median"]) + (f" ({r['normalised_sampled']:.2f})" if ref else "")
        lines.append(f"| {r['task']} | {r['frames']:,} | {num(r['random'])} | {num(r['median'])} "
                     f"({num(r['min'])} to {num(r['max'])}) | {num(ref['value']) if ref else '-'} | {norm} | {sampled} "
                     f"| {r['minutes']:.0f} |")
    scored = [r for r in rows if "normalised" in r]
    if scored:
        lines.append(f"\nmedian normalised score over {len(scored)} tasks: "
                     f"{statistics.median(r['normalised'] for r in scored):.2f} (sampled actions: "
                     f"{statistics.median(r['normalised_sampled'] for r in scored):.2f}); wall time {hours:.2f} h"
                     + (f" over {invocations} invocations (stopped and resumed)" if invocations > 1 else ""))
    lines.append("\nreferences:")
    lines += [f"  {r['task']}: {r['reference']['source']}" for r in rows if r["reference"]]
    return "\n".join(lines)


def plot(rows: list[dict], curves: dict, path: Path) -> None:
    """One panel per task: the seeds' eval returns (median and range, dreamer/io/curves.py), the
    official median and band for DMC tasks, the random policy and the stated reference as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from benchmarks.learning import REFERENCE_DIR
    from dreamer.io.curves import draw, reference_curves

    cols = min(4, len(rows))
    lines = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(lines, cols, figsize=(3.8 * cols, 3.0 * lines), squeeze=False)
    for ax, row in zip(axes.flat, rows):
        official = REFERENCE_DIR / f"dmc_proprio_{row['task']}.json"
        draw(ax, list(curves[row["task"]].values()),
             reference_curves(official, f"dmc_{row['task']}") if official.exists() else None, label="experiment=cpu")
        ax.axhline(row["random"], color="tab:red", linestyle=":", label="random policy")
        if row["reference"] and not official.exists():
            ax.axhline(row["reference"]["value"], color="tab:green", linestyle="--", label="solved")
        ax.set_title(row["task"], fontsize=9)
        ax.tick_params(labelsize=7)
        ax.xaxis.label.set_size(8)
        ax.yaxis.label.set_size(8)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def add_wall_time(out: Path, seconds: float) -> dict:
    """Adds one invocation's seconds (a stopped one's too) to <out>/wall_time.json and returns the
    sum: a suite stopped and resumed reports the time of all its invocations, not its last one's."""
    path = out / "wall_time.json"
    wall = json.loads(path.read_text()) if path.exists() else {"seconds": 0.0, "invocations": 0}
    wall = {"seconds": wall["seconds"] + seconds, "invocations": wall["invocations"] + 1}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(wall))
    tmp.replace(path)
    return wall


def run_minutes(run_dir: Path) -> float:
    """A run's training time in minutes: each of its processes' last elapsed time, summed (a
    resumed run's clock starts again at 0)."""
    from dreamer.io.metrics import read_metrics

    total, last = 0.0, 0.0
    for elapsed in (r["time/elapsed_s"] for r in read_metrics(run_dir / "metrics.jsonl") if "time/elapsed_s" in r):
        if elapsed < last:  # a resume: the previous process ended at `last`
            total += last
        last = elapsed
    return (total + last) / 60
