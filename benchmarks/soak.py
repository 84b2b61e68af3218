"""Soak benchmark: a long training run with the process tree's memory and size sampled over time.

    python -m benchmarks.soak [--minutes 20] [--every 30] [train.py overrides ...]
    python -m benchmarks.soak --attach PID [--minutes 20]   # sample a run that is already going

Starts `train.py` (default: the CPU preset, experiment=quick, with a budget it will not reach)
and every `--every` seconds samples the driver's RSS, the whole tree's RSS and the number of
processes. At the end it stops the run with SIGINT (as Ctrl-C would) and prints the samples, the
maximum and the least-squares slope of each series over the second half of the steady-state
samples (the usual process count: not start-up or shutdown), in MB per hour; all go to soak.json.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_RUN = ["experiment=quick", "collector.total_frames=10000000", "eval.every=0", "checkpoint.every=0"]


class Attached:
    """A running process seen through the subprocess.Popen methods this script uses."""

    def __init__(self, pid: int):
        self.pid, self._proc, self.returncode = pid, psutil.Process(pid), None
        self.stderr = type("NoStream", (), {"read": staticmethod(lambda: "")})()

    def poll(self):
        return None if self._proc.is_running() and self._proc.status() != psutil.STATUS_ZOMBIE else 0


def tree(pid: int) -> list[psutil.Process]:
    main = psutil.Process(pid)
    return [main] + main.children(recursive=True)


def sample(pid: int, start: float) -> dict:
    procs = tree(pid)
    rss = 0
    for proc in procs:
        try:
            rss += proc.memory_info().rss
        except psutil.Error:
            pass
    return {"t_s": round(time.monotonic() - start, 1), "driver_rss_mb": procs[0].memory_info().rss / 2**20,
            "tree_rss_mb": rss / 2**20, "processes": len(procs)}


def slope_per_hour(samples: list[dict], key: str) -> float:
    """Least-squares slope of `key` against time over the second half of the samples (per hour)."""
    half = samples[len(samples) // 2:]
    if len(half) < 2:
        return float("nan")
    ts = [s["t_s"] for s in half]
    ys = [s[key] for s in half]
    t_mean, y_mean = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - t_mean) ** 2 for t in ts)
    return 3600 * sum((t - t_mean) * (y - y_mean) for t, y in zip(ts, ys)) / var if var else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=20)
    parser.add_argument("--every", type=float, default=30, help="seconds between samples")
    parser.add_argument("--run-dir", default=f"outputs/soak-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--attach", type=int, help="sample this running train.py (left running at the end)")
    parser.add_argument("overrides", nargs="*", help="train.py overrides (default: %(default)s)",
                        default=DEFAULT_RUN)
    args = parser.parse_args(argv)
    if args.attach:
        proc = Attached(args.attach)
        print(f"sampling pid {args.attach}: {' '.join(psutil.Process(args.attach).cmdline()[1:])}", flush=True)
    else:
        command = [sys.executable, "train.py", *args.overrides, f"hydra.run.dir={args.run_dir}"]
        print("+", " ".join(command[1:]), flush=True)
        proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    start = time.monotonic()
    samples = []
    try:
        while time.monotonic() - start < 60 * args.minutes:
            if proc.poll() is not None and args.attach:
                print("the attached run ended", flush=True)
                break
            if proc.poll() is not None:
                sys.exit(f"train.py exited early ({proc.returncode}):\n{proc.stderr.read()[-3000:]}")
            samples.append(sample(proc.pid, start))
            s = samples[-1]
            print(f"{s['t_s']:7.0f} s  driver {s['driver_rss_mb']:7.0f} MB  tree {s['tree_rss_mb']:7.0f} MB  "
                  f"{s['processes']} processes", flush=True)
            time.sleep(args.every)
    finally:
        if proc.poll() is None and not args.attach:
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: final checkpoint, workers stopped
            proc.wait(timeout=120)
    # Steady state: the samples with the usual process count (not start-up or shutdown).
    usual = max(set(s["processes"] for s in samples), key=[s["processes"] for s in samples].count)
    steady = [s for s in samples if s["processes"] == usual]
    left = [p for p in psutil.process_iter(["cmdline"]) if args.run_dir in " ".join(p.info["cmdline"] or [])]
    result = {
        "minutes": args.minutes, "samples": samples, "exit_code": proc.returncode, "processes_left": len(left),
        "steady_samples": len(steady),
        "driver_rss_max_mb": max(s["driver_rss_mb"] for s in steady),
        "tree_rss_max_mb": max(s["tree_rss_mb"] for s in steady),
        "driver_rss_first_last_mb": [steady[0]["driver_rss_mb"], steady[-1]["driver_rss_mb"]],
        "tree_rss_first_last_mb": [steady[0]["tree_rss_mb"], steady[-1]["tree_rss_mb"]],
        "driver_rss_slope_mb_per_h": slope_per_hour(steady, "driver_rss_mb"),
        "tree_rss_slope_mb_per_h": slope_per_hour(steady, "tree_rss_mb"),
        "processes_max": max(s["processes"] for s in samples), "processes_min": min(s["processes"] for s in samples),
    }
    Path(ROOT / args.run_dir).mkdir(parents=True, exist_ok=True)
    (ROOT / args.run_dir / "soak.json").write_text(json.dumps(result, indent=2))
    ending = ("left running (attached)" if args.attach else
              f"train.py exit code {proc.returncode} after SIGINT, {len(left)} processes left")
    print(f"\n{len(samples)} samples over {args.minutes:g} min; {ending}")
    print(f"steady state: {len(steady)} samples with {usual} processes\n")
    print("| series | first | last | max | slope over 2nd half (MB/h) |\n|---|---|---|---|---|")
    for name, key in (("driver RSS (MB)", "driver_rss"), ("process tree RSS (MB)", "tree_rss")):
        first, last = result[f"{key}_first_last_mb"]
        print(f"| {name} | {first:.0f} | {last:.0f} | {result[f'{key}_max_mb']:.0f} | "
              f"{result[f'{key}_slope_mb_per_h']:+.1f} |")
    print(f"| processes | {result['processes_max']} (min {result['processes_min']}) | |")


if __name__ == "__main__":
    main()
