"""`python train.py` end to end, as users run it: train, log, evaluate, checkpoint, resume."""
import json
import subprocess
import sys
import uuid

import pytest

from dreamer.io.metrics import read_metrics
from tests.conftest import ROOT, run_train
from tests.helpers import RUN, processes_tagged

UPDATES_AT = {600: 1 + 300 * 16 // 64, 800: 1 + 500 * 16 // 64}  # 1 + (frames - prefill) x ratio / (B x T)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("train") / "run"
    tag = uuid.uuid4().hex
    proc = run_train(*RUN, "collector.total_frames=600", f"hydra.run.dir={run_dir}",
                     env_extra={"DREAMER_TEST_TAG": tag}, timeout=400)
    return proc, run_dir, tag


@pytest.mark.slow
def test_training_run_logs_evaluates_checkpoints_and_leaves_no_process(first_run):
    proc, run_dir, tag = first_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert processes_tagged(tag) == [], "worker processes outlived train.py"
    assert f"trained to 600 env steps ({UPDATES_AT[600]} updates)" in proc.stdout
    rows = read_metrics(run_dir / "metrics.jsonl")
    train_rows = [r for r in rows if "train/loss_model_reco" in r]
    assert train_rows and all(r["train/loss_model_reco"] > 0 for r in train_rows)
    assert any("episode/return" in r for r in rows), "no finished episode was logged"
    assert max(r.get("train/updates", 0) for r in rows) == UPDATES_AT[600]
    assert all(r["collect/env_steps_per_s"] >= 0 for r in rows if "collect/env_steps_per_s" in r)
    evals = [r for r in rows if "eval/return" in r]
    assert [r["step"] for r in evals][-1] == 600 and len(evals) >= 2  # periodic and final
    videos = [r["eval/video"] for r in rows if "eval/video" in r]
    assert videos and (run_dir / "videos").is_dir() and all(open(v, "rb").read(12)[4:8] == b"ftyp" for v in videos)
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*.pt"))
    assert checkpoints[-1] == "step_000000000600.pt"
    assert list((run_dir / "wandb").glob("offline-run-*")), "no offline wandb run in the run dir"
    scores = {r["split"]: r for r in json.loads((run_dir / "scores.json").read_text())}
    assert scores["eval"]["xs"][-1] == 600 * 8 and scores["eval"]["task"] == "dmc_cartpole_balance"  # frames
    assert scores["eval"]["xs"] == sorted(set(scores["eval"]["xs"]))  # one eval per step
    train = scores["train"]  # every training episode: envs ending one together share a step
    assert train["xs"] == sorted(train["xs"]) and len(train["xs"]) == len(train["ys"]) > 0
    episodes = (run_dir / "episodes.jsonl").read_text().splitlines()
    assert len(train["xs"]) == len(episodes)


@pytest.mark.slow
def test_resume_continues_counters_replay_and_wandb_run(first_run, tmp_path):
    proc, first_dir, _ = first_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "resumed"
    resumed = run_train(*RUN, "collector.total_frames=800", f"resume={first_dir / 'checkpoints'}",
                        f"hydra.run.dir={run_dir}", timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at 600 env steps, {UPDATES_AT[600]} updates" in resumed.stdout
    assert f"trained to 800 env steps ({UPDATES_AT[800]} updates)" in resumed.stdout
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert min(r["step"] for r in rows) > 600
    assert rows[0]["replay/size"] > 600  # the checkpoint's replay came back
    first_id = next((first_dir / "wandb").glob("offline-run-*")).name.rsplit("-", 1)[1]
    resumed_id = next((run_dir / "wandb").glob("offline-run-*")).name.rsplit("-", 1)[1]
    assert resumed_id == first_id


@pytest.mark.slow
def test_resume_with_another_model_size_fails_naming_the_key(first_run, tmp_path):
    proc, first_dir, _ = first_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    bad = run_train(*RUN, "world_model=xs", f"resume={first_dir / 'checkpoints'}",
                    f"hydra.run.dir={tmp_path / 'bad'}", timeout=120)
    assert bad.returncode == 2
    assert "world_model.size" in bad.stderr


def run_evaluate(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dreamer.evaluate", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_evaluate_a_trained_checkpoint_prints_returns_writes_a_video_and_repeats(first_run, tmp_path):
    proc, run_dir, _ = first_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = run_evaluate(f"checkpoint={run_dir / 'checkpoints'}", "eval.episodes=2", "eval.video=true",
                       f"out={tmp_path}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "at 600 env steps" in out.stdout and "over 2 episode(s)" in out.stdout
    result = json.loads((tmp_path / "eval.json").read_text())
    assert len(result["returns"]) == 2 and result["env_steps"] == 600
    assert result["mean"] == pytest.approx(sum(result["returns"]) / 2)
    assert open(result["videos"]["eval/video"], "rb").read(12)[4:8] == b"ftyp"
    again = run_evaluate(f"checkpoint={run_dir / 'checkpoints'}", "eval.episodes=2", f"out={tmp_path / 'again'}")
    assert again.returncode == 0, again.stderr[-3000:]
    assert json.loads((tmp_path / "again" / "eval.json").read_text())["returns"] == result["returns"]  # seeded


@pytest.mark.slow
def test_evaluate_rejects_an_env_the_model_cannot_read(first_run):
    proc, run_dir, _ = first_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = run_evaluate(f"checkpoint={run_dir / 'checkpoints'}", "env=dmc_walker_walk", timeout=120)
    assert out.returncode == 1 and "env.obs" in out.stderr


@pytest.mark.parametrize("args, message", [
    ((), "checkpoint=PATH"),
    (("checkpoint=/no/such/file.pt",), "no such file"),
    (("checkpoint={truncated}",), "truncated or corrupt"),
    (("checkpoint={truncated}", "episodes=3"), "'episodes': not an evaluation option"),
])
def test_evaluate_fails_clearly_on_bad_checkpoints_and_arguments(tmp_path, args, message):
    truncated = tmp_path / "step_000000000100.pt"
    truncated.write_bytes(b"PK\x03\x04" + b"\0" * 100)  # a zip header, then nothing
    out = run_evaluate(*[a.format(truncated=truncated) for a in args], timeout=120)
    assert out.returncode == 1 and message in out.stderr, out.stderr


@pytest.mark.slow
def test_resume_from_a_dir_whose_newest_checkpoint_is_truncated_takes_the_previous_one(first_run, tmp_path):
    import shutil

    from dreamer.io import checkpoint

    proc, first_dir, _ = first_run
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpts = tmp_path / "checkpoints"
    shutil.copytree(first_dir / "checkpoints", ckpts)
    older, newest = checkpoint.list_checkpoints(ckpts)[-2:]
    newest.write_bytes(newest.read_bytes()[:1000])
    older_frames = checkpoint.load(older)["frames"]
    resumed = run_train(*RUN, f"collector.total_frames={older_frames}", f"resume={ckpts}", "logger=none",
                        f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    warning = next(line for line in resumed.stderr.splitlines() if line.startswith("warning: skipped"))
    assert newest.name in warning and older.name in warning
    assert f"resuming at {older_frames} env steps" in resumed.stdout


@pytest.mark.slow
def test_a_run_with_replay_prefetch_trains_checkpoints_and_exits(tmp_path):
    """replay.prefetch=1 on the CPU (auto turns it on for a CUDA learner): same updates, clean exit."""
    proc = run_train(*RUN, "collector.total_frames=400", "replay.prefetch=1", "eval.every=0",
                     f"hydra.run.dir={tmp_path}", timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"trained to 400 env steps ({1 + 100 * 16 // 64} updates)" in proc.stdout
    assert (tmp_path / "checkpoints" / "step_000000000400.pt").exists()
