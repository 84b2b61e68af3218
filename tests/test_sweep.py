"""Sweeps: `train.py -m` over a collector key, the summary report, and the launcher presets."""
import json
import math
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from dreamer.config import register_configs
from dreamer.io.metrics import sweep_group_name
from dreamer.report import summarize, sweep_summary
from tests.conftest import ROOT, run_train

TINY = ("env=dmc_cartpole_balance", "env.action_repeat=8", "world_model=tiny", "collector.num_envs=2",
        "collector.frames_per_batch=32", "replay.batch_size=4", "replay.batch_length=16",
        "learner.prefill_frames=64", "learner.train_ratio=8", "collector.total_frames=320",
        "logger.every=32", "eval.every=320", "eval.video=false", "checkpoint.every=0")


@pytest.mark.slow
def test_two_value_sweep_writes_run_dirs_and_a_summary(tmp_path):
    sweep_dir = tmp_path / "sweep"
    proc = run_train("-m", *TINY, "collector.transition_chunk_size=1,8", f"hydra.sweep.dir={sweep_dir}",
                     timeout=500)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1"):
        assert (sweep_dir / job / "metrics.jsonl").exists()
    summary = json.loads((sweep_dir / "summary.json").read_text())
    assert summary["swept"] == ["collector.transition_chunk_size"]
    assert [job["values"]["collector.transition_chunk_size"] for job in summary["jobs"]] == ["1", "8"]
    for job in summary["jobs"]:
        for key in ("env_steps_per_s", "updates_per_s", "driver_cpu_ms_per_step", "peak_tree_rss_mb",
                    "final_eval_return"):
            assert math.isfinite(job[key]) and job[key] >= 0, (key, job)
    table = (sweep_dir / "summary.md").read_text()
    assert "| 0 | 1 |" in table and "| 1 | 8 |" in table
    assert (sweep_dir / "summary.png").read_bytes()[:4] == b"\x89PNG"
    assert proc.stdout.rstrip().endswith(table.rstrip())  # the table prints last
    # the jobs' wandb runs and the summary run share the sweep's group (in the runs' protobuf records)
    group = sweep_group_name(sweep_dir).encode()
    runs = list(sweep_dir.glob("*/wandb/offline-run-*/*.wandb")) + list(sweep_dir.glob("wandb/offline-run-*/*.wandb"))
    assert len(runs) == 3 and all(group in run.read_bytes() for run in runs)


def test_report_cli_rebuilds_the_summary_and_rejects_an_empty_dir(tmp_path):
    empty = subprocess.run([sys.executable, "-m", "dreamer.report", str(tmp_path)], cwd=ROOT,
                           capture_output=True, text=True)
    assert empty.returncode == 1 and "no job with a metrics.jsonl" in empty.stderr
    for job, rate in (("0", 10.0), ("1", 20.0)):
        (tmp_path / job / ".hydra").mkdir(parents=True)
        (tmp_path / job / ".hydra" / "overrides.yaml").write_text(f"- collector.transition_chunk_size={job}\n- seed=3\n")
        rows = [{"step": s, "train/updates": u, "time/elapsed_s": t, "system/tree_rss_mb": 100.0 + s}
                for s, u, t in ((100, 0, 10.0), (150, 1, 15.0), (200, 5, 20.0), (400, 25, 20.0 + 200 / rate))]
        rows.append({"step": 400, "eval/return": 7.0})
        (tmp_path / job / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = subprocess.run([sys.executable, "-m", "dreamer.report", str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    summary = sweep_summary(tmp_path)
    assert summary["swept"] == ["collector.transition_chunk_size"]  # seed is the same in both jobs
    assert [round(j["env_steps_per_s"], 6) for j in summary["jobs"]] == [10.0, 20.0]
    assert "| 1 | 1 | 20.0 |" in out.stdout


def test_steady_window_skips_prefill_and_the_rows_after_the_budget():
    rows = [{"step": 100, "train/updates": 0, "time/elapsed_s": 50.0},   # prefill (and compile) time
            {"step": 150, "train/updates": 1, "time/elapsed_s": 55.0},   # the first update
            {"step": 200, "train/updates": 10, "time/elapsed_s": 60.0},
            {"step": 300, "train/updates": 20, "time/elapsed_s": 70.0,
             "collect/driver_cpu_ms_per_step": 0.5},
            {"step": 400, "train/updates": 40, "time/elapsed_s": 90.0,   # budget reached: workers stopping
             "collect/driver_cpu_ms_per_step": 9.0}]
    out = summarize(rows, budget=400)
    assert out["window_steps"] == [200, 300]
    assert out["env_steps_per_s"] == pytest.approx(10.0) and out["updates_per_s"] == pytest.approx(1.0)
    assert out["driver_cpu_ms_per_step"] == pytest.approx(0.5)
    assert math.isnan(out["final_eval_return"])


@pytest.mark.parametrize("launcher, key, expected", [
    ("slurm", "cpus_per_task", 6),  # num_envs 4 + driver + inference server
    ("slurm", "gpus_per_node", 1),
    ("slurm", "_target_", "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
    ("parallel", "n_jobs", 2),
    ("parallel", "_target_", "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"),
])
def test_launcher_presets_compose(launcher, key, expected):
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=[f"hydra/launcher={launcher}", "collector.num_envs=4"],
                      return_hydra_config=True)
    assert OmegaConf.select(cfg, f"hydra.launcher.{key}") == expected


def test_slurm_data_parallel_asks_one_gpu_per_task():
    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/launcher=slurm", "hydra.launcher.tasks_per_node=4",
                                                       "hydra.launcher.nodes=2"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert (launcher.tasks_per_node, launcher.nodes, launcher.gpus_per_node) == (4, 2, 4)


@pytest.mark.parametrize("launcher", ["slurm", "parallel", "submitit_slurm", "joblib"])
def test_launcher_configs_compose_from_the_command_line(launcher):
    proc = subprocess.run([sys.executable, "train.py", f"hydra/launcher={launcher}", "--cfg", "hydra"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "launcher:" in proc.stdout and "_target_: hydra_plugins" in proc.stdout
