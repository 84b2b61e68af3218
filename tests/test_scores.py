"""Score export in the official DreamerV3 format and the `report compare` command."""
import gzip
import json
import math
import subprocess
import sys

import pytest

from dreamer.io.scores import compare, load_records, value_at, write_scores
from tests.conftest import ROOT


def make_run(run_dir, evals, episodes):
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"step": s, "train/updates": 1.0} for s, _ in evals] + [{"step": s, "eval/return": r} for s, r in evals]
    (run_dir / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in sorted(rows, key=lambda r: r["step"])))
    (run_dir / "episodes.jsonl").write_text("\n".join(json.dumps({"step": s, "return": r, "length": 500})
                                                      for s, r in episodes))


def test_scores_file_has_official_fields_and_increasing_frames(tmp_path):
    make_run(tmp_path, evals=[(500, 10.0), (1000, 30.0), (1000, 31.0)],
             episodes=[(250, 5.0), (750, 8.0), (750, 9.0)])  # two envs ended an episode at step 750
    path = write_scores(tmp_path, "dmc_cartpole_swingup", seed=3, action_repeat=2)
    records = load_records(path)
    assert [r["split"] for r in records] == ["eval", "train"]
    for r in records:
        assert {"task", "method", "seed", "xs", "ys"} <= set(r) and r["seed"] == "3"
        assert all(b >= a for a, b in zip(r["xs"], r["xs"][1:]))
    assert records[0]["xs"] == [1000, 2000] and records[0]["ys"] == [10.0, 31.0]  # frames = steps x repeat
    assert records[1]["xs"] == [500, 1500, 1500] and records[1]["ys"] == [5.0, 8.0, 9.0]  # every episode


def test_value_at_steps_for_our_evals_and_interpolates_references():
    xs, ys = [100, 200, 300], [1.0, 3.0, 5.0]
    assert value_at(xs, ys, 250, interpolate=False) == 3.0
    assert value_at(xs, ys, 250, interpolate=True) == pytest.approx(4.0)
    assert math.isnan(value_at(xs, ys, 50, interpolate=True))
    assert math.isnan(value_at(xs, ys, 400, interpolate=True)) and value_at(xs, ys, 400, interpolate=False) == 5.0


def test_compare_prints_both_curves_at_matching_budgets(tmp_path):
    run = tmp_path / "run"
    make_run(run, evals=[(50_000, 100.0), (100_000, 300.0)], episodes=[])
    write_scores(run, "dmc_walker_walk", seed=0, action_repeat=2)
    reference = tmp_path / "ref.json.gz"
    with gzip.open(reference, "wt") as f:
        json.dump([{"task": "dmc_walker_walk", "method": "dreamerv3", "seed": str(s), "xs": [0, 200_000],
                    "ys": [0.0, 400.0 + 100 * s]} for s in range(2)]
                  + [{"task": "dmc_cheetah_run", "method": "dreamerv3", "seed": "0", "xs": [0], "ys": [1.0]}], f)
    table = compare(run, reference, budgets=[100_000, 200_000])
    assert "| 100,000 | 100.0 | 225.0 | 200.0-250.0 |" in table
    assert "| 200,000 | 300.0 | 450.0 | 400.0-500.0 |" in table
    cli = subprocess.run([sys.executable, "-m", "dreamer.report", "compare", str(run), str(reference)], cwd=ROOT,
                         capture_output=True, text=True)
    assert cli.returncode == 0 and "| 200,000 | 300.0 |" in cli.stdout, cli.stderr
    missing = subprocess.run([sys.executable, "-m", "dreamer.report", "compare", str(run), str(tmp_path / "x.json")],
                             cwd=ROOT, capture_output=True, text=True)
    assert missing.returncode == 1 and "error:" in missing.stderr


def test_an_atari100k_run_compares_with_the_official_atari100k_file_naming_it_atari_game(tmp_path):
    run = tmp_path / "run"
    make_run(run, evals=[(100_000, -10.0)], episodes=[])
    write_scores(run, "atari100k_pong", seed=0, action_repeat=4)
    assert json.loads((run / "scores.json").read_text())[0]["task"] == "atari100k_pong"
    reference = tmp_path / "atari100k-dreamerv3.json"
    reference.write_text(json.dumps([{"task": "atari_pong", "method": "dreamerv3", "seed": "0",
                                      "xs": [0, 400_000], "ys": [-21.0, -4.0]},
                                     {"task": "atari_breakout", "method": "dreamerv3", "seed": "0",
                                      "xs": [0, 400_000], "ys": [0.0, 11.0]}]))
    table = compare(run, reference, budgets=[400_000])
    assert "| 400,000 | -10.0 | -4.0 | -4.0--4.0 |" in table
