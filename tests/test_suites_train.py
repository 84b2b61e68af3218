"""`python train.py env=<preset>` on each new suite, as users run it: a short run with an eval video
and a checkpoint, scores in the official format, then `dreamer.evaluate` on a discrete checkpoint."""
import json
import subprocess
import sys

import pytest

from dreamer.io.metrics import read_metrics
from tests.conftest import ROOT, run_train

SHORT = ("world_model=tiny", "collector.num_envs=2", "collector.transition_chunk_size=8", "replay.batch_size=2",
         "replay.batch_length=8", "learner.train_ratio=8", "logger=none")
PRESETS = {  # preset: (env steps, prefill, official task name)
    "gym_cartpole": (300, 100, "gym_CartPole-v1"),
    "atari_pong": (160, 80, "atari100k_pong"),
    "crafter": (160, 80, "crafter_reward"),
    "minigrid": (200, 100, "gym_MiniGrid-Empty-8x8-v0"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {}


def trained(runs, tmp_path_factory, preset):
    if preset not in runs:
        steps, prefill, _ = PRESETS[preset]
        run_dir = tmp_path_factory.mktemp(preset) / "run"
        proc = run_train(f"env={preset}", *SHORT, f"collector.total_frames={steps}",
                         f"learner.prefill_frames={prefill}", f"eval.every={steps}", f"hydra.run.dir={run_dir}",
                         timeout=500)
        runs[preset] = (proc, run_dir)
    return runs[preset]


@pytest.mark.slow
@pytest.mark.parametrize("preset", list(PRESETS))
def test_a_short_run_trains_evaluates_with_a_video_and_checkpoints(runs, tmp_path_factory, preset):
    proc, run_dir = trained(runs, tmp_path_factory, preset)
    steps, _, task = PRESETS[preset]
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"trained to {steps} env steps" in proc.stdout
    ckpt = run_dir / "checkpoints" / f"step_{steps:012d}.pt"
    # replay holds `steps` records of the default 1M capacity: the checkpoint saves those, not the ring
    assert ckpt.exists() and ckpt.stat().st_size < 30e6, ckpt.stat().st_size
    video = run_dir / "videos" / f"eval_{steps:09d}.mp4"  # the final evaluation
    assert open(video, "rb").read(12)[4:8] == b"ftyp"
    scores = {r["split"]: r for r in json.loads((run_dir / "scores.json").read_text())}
    assert scores["eval"]["task"] == task and len(scores["eval"]["ys"]) == 1
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert any(r.get("train/loss_model_reco", 0) > 0 for r in rows)


@pytest.mark.slow
def test_minigrid_names_the_text_it_leaves_out(runs, tmp_path_factory):
    proc, _ = trained(runs, tmp_path_factory, "minigrid")
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("warning: env.id"))
    assert "MiniGrid-Empty-8x8-v0" in line and "mission" in line and "left out" in line
    assert "(symbolic)" in proc.stdout  # the start-up line says what the agent observes


@pytest.mark.slow
def test_evaluate_a_discrete_checkpoint_with_sampled_actions(runs, tmp_path_factory, tmp_path):
    proc, run_dir = trained(runs, tmp_path_factory, "gym_cartpole")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = subprocess.run([sys.executable, "-m", "dreamer.evaluate", f"checkpoint={run_dir / 'checkpoints'}",
                          "eval.episodes=2", "eval.sample_actions=true", f"out={tmp_path}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sampled actions" in out.stdout and "over 2 episode(s)" in out.stdout
    result = json.loads((tmp_path / "eval.json").read_text())
    assert result["task"] == "gym_CartPole-v1" and len(result["returns"]) == 2
    assert all(r == length for r, length in zip(result["returns"], result["lengths"]))  # +1 per step
    assert open(result["videos"]["eval/video"], "rb").read(12)[4:8] == b"ftyp"  # rgb_array frames
    bad = subprocess.run([sys.executable, "-m", "dreamer.evaluate", f"checkpoint={run_dir / 'checkpoints'}",
                          "env=atari_pong"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "env.obs" in bad.stderr


@pytest.mark.slow
def test_a_bad_gym_space_fails_at_start_up_naming_the_key(tmp_path):
    proc = run_train("env=gym", "env.id=tests.gym_envs:DreamerTest/MultiDiscrete-v0", "world_model=tiny",
                     f"hydra.run.dir={tmp_path}", timeout=120)
    assert proc.returncode == 2
    assert "env.id" in proc.stderr and "MultiDiscrete" in proc.stderr
    assert not (tmp_path / "checkpoints").exists()  # nothing started


@pytest.mark.slow
def test_a_discrete_run_resumes_from_its_checkpoint(runs, tmp_path_factory, tmp_path):
    proc, run_dir = trained(runs, tmp_path_factory, "gym_cartpole")
    assert proc.returncode == 0, proc.stderr[-3000:]
    steps, prefill, _ = PRESETS["gym_cartpole"]
    resumed = run_train("env=gym_cartpole", *SHORT, "collector.total_frames=400", f"learner.prefill_frames={prefill}",
                        "eval.every=400", f"resume={run_dir / 'checkpoints'}", f"hydra.run.dir={tmp_path}",
                        timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at {steps} env steps" in resumed.stdout and "trained to 400 env steps" in resumed.stdout
    assert (tmp_path / "checkpoints" / "step_000000000400.pt").exists()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert next(r for r in rows if "replay/size" in r)["replay/size"] > steps  # the checkpoint's replay came back
