"""`python -m dreamer.report plot`: runs (seeds) of one task as their median and range beside a
reference score file's median and band, written as a PNG."""
import gzip
import json
import subprocess
import sys

import numpy as np

from dreamer.io import curves
from tests.conftest import ROOT


def fake_run(path, seed, task="dmc_walker_walk", scale=1.0):
    path.mkdir(parents=True)
    xs = [10_000, 20_000, 30_000]
    records = [{"task": task, "method": "dreamer-app", "seed": str(seed), "split": "eval", "xs": xs,
                "ys": [scale * x / 100 for x in xs]},
               {"task": task, "method": "dreamer-app", "seed": str(seed), "split": "train", "xs": [5_000, 25_000],
                "ys": [1.0, 2.0]}]
    (path / "scores.json").write_text(json.dumps(records))
    return path


def test_plot_draws_the_runs_median_and_the_reference_band(tmp_path):
    runs = [fake_run(tmp_path / f"seed{i}", i, scale=s) for i, s in enumerate((1.0, 2.0, 3.0))]
    reference = tmp_path / "ref.json.gz"
    with gzip.open(reference, "wt") as f:  # the official format: a list of records, several tasks
        json.dump([{"task": "dmc_walker_walk", "method": "dreamerv3", "seed": str(i),
                    "xs": [0, 50_000, 100_000], "ys": [0, 500 + i, 900]} for i in range(5)]
                  + [{"task": "dmc_cheetah_run", "method": "dreamerv3", "seed": "0", "xs": [0, 1], "ys": [0, 1]}], f)
    out = tmp_path / "curves.png"
    proc = subprocess.run([sys.executable, "-m", "dreamer.report", "plot", *map(str, runs), "--reference",
                           str(reference), "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "2 series (3 run(s), and the reference)" in proc.stdout
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    xs, median, low, high = curves.band([curves.run_curve(r) for r in runs])
    assert list(xs) == [10_000, 20_000, 30_000]
    assert np.allclose(median, [200, 400, 600]) and np.allclose(low, [100, 200, 300]) and np.allclose(high, [300, 600, 900])
    ref = curves.reference_curves(reference, "dmc_walker_walk")
    assert len(ref) == 5  # the other task's record is left out


def test_plot_refuses_runs_of_different_tasks_with_one_line(tmp_path):
    a, b = fake_run(tmp_path / "a", 0), fake_run(tmp_path / "b", 0, task="dmc_cheetah_run")
    proc = subprocess.run([sys.executable, "-m", "dreamer.report", "plot", str(a), str(b), "--out",
                           str(tmp_path / "x.png")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip().startswith("error: the runs are of different tasks")
