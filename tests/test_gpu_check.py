"""The one-shot device check: its CPU rehearsal runs every step and writes the JSON."""
import json
import os
import subprocess
import sys

import pytest

from benchmarks import gpu_check
from dreamer.config.overrides import check_override_keys
from tests.conftest import ROOT


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_dry_run_runs_every_step_and_writes_results(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path)}
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--dry-run"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)  # bounds a hang only
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = json.loads((tmp_path / "gpu_check.json").read_text())["steps"]
    assert list(steps) == [name for name, _, _ in gpu_check.STEPS]
    assert {n: s["status"] for n, s in steps.items()} == {
        "environment": "ok", "learner": "ok", "sampling": "ok", "inference": "ok", "train": "interrupted as planned"}
    assert steps["environment"]["result"]["cuda_available"] is False
    assert steps["learner"]["result"]["learner"][0]["app_ms"] > 0
    assert len(steps["sampling"]["result"]["sampling"]) == 2
    served = steps["inference"]["result"]["rows"][0]
    assert served["batching"] == "dynamic" and served["requests"] > 0 and served["p50_forward_ms"] > 0
    train = steps["train"]["result"]
    assert train["updates"] >= gpu_check.DRY_TRAIN_UPDATES and train["collect/env_steps_per_s"] > 0
    assert train["train/update_ms"] > 0 and train["train/sample_wait_ms"] >= 0
    log = (tmp_path / "gpu_check.log").read_text()
    assert "===== train:" in log and "checkpoint:" in log  # the SIGINT path wrote its checkpoint


def test_without_a_gpu_it_asks_for_the_dry_run():
    if __import__("torch").cuda.is_available():
        pytest.skip("a GPU is here")
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and "--dry-run" in proc.stderr


@pytest.mark.parametrize("dry", [False, True])
def test_the_train_step_names_existing_keys(dry, tmp_path):
    cmd = gpu_check.commands(dry, tmp_path)["train"]
    overrides = cmd[2:]
    check_override_keys(overrides)  # raises ConfigError naming a key that does not exist
    if not dry:  # the seed's flags, on 16 envs with a static batch of 16
        assert "experiment=seed_pixel_64env" in overrides
        assert "collector.inference_static_batch_size=16" in overrides


def test_train_summary_skips_the_first_window(tmp_path):
    rows = [{"step": 100, "train/updates_per_s": 0.1, "train/updates": 1, "train/update_ms": 9000.0,
             "collect/env_steps_per_s": 50.0},
            {"step": 200, "train/updates_per_s": 2.0, "train/updates": 5, "train/update_ms": 40.0,
             "train/sample_wait_ms": 4.0, "collect/env_steps_per_s": 100.0},
            {"step": 300, "train/updates_per_s": 4.0, "train/updates": 9, "train/update_ms": 60.0,
             "train/sample_wait_ms": 6.0, "collect/env_steps_per_s": 300.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = gpu_check.train_summary(tmp_path)
    assert summary["windows"] == 2 and summary["updates"] == 9 and summary["env_steps"] == 300
    assert summary["train/update_ms"] == pytest.approx(50.0)
    assert summary["collect/env_steps_per_s"] == pytest.approx(200.0)
