"""logger=tensorboard, as a user meets it: `python train.py logger=tensorboard` leaves event files in
the run dir with the metrics file's scalars, the eval videos and the config; backends combine."""
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from dreamer.io.metrics import MetricsLogger, read_metrics
from tests.conftest import run_train


def events(run_dir):
    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0, "scalars": 0})
    acc.Reload()
    return acc


@pytest.mark.slow
def test_a_tensorboard_run_logs_the_scalars_videos_and_config(tmp_path):
    proc = run_train("experiment=learn_cartpole", "logger=tensorboard", "collector.total_frames=600",
                     "learner.prefill_frames=200", "logger.every=200", "eval.every=600", "eval.episodes=1",
                     "learner.compile=false", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    acc = events(tmp_path)
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if "eval/return" in r or "train/updates" in r]
    for key in ("eval/return", "train/updates"):
        logged = {(r["step"], r[key]) for r in rows if r.get(key) is not None}
        scalars = sorted((e.step, e.value) for e in acc.Scalars(key))  # float32 in the event file
        assert logged and [s for s, _ in scalars] == sorted(s for s, _ in logged), key
        assert [v for _, v in scalars] == pytest.approx([v for _, v in sorted(logged)], rel=1e-6), key
    image = acc.Images("eval/video")[-1]
    assert image.step == 600 and image.encoded_image_string[:6] == b"GIF89a"
    assert "config" in " ".join(acc.Tags()["tensors"]) and not (tmp_path / "wandb").exists()


def test_backends_combine_and_none_writes_only_the_files(tmp_path):
    both = MetricsLogger(tmp_path / "both", backends=["wandb", "tensorboard"], mode="offline", config={"seed": 1})
    both.log(10, {"train/loss": 0.5, "note": "text"})
    both.close()
    assert (tmp_path / "both" / "wandb").exists()
    assert [e.value for e in events(tmp_path / "both").Scalars("train/loss")] == [0.5]
    none = MetricsLogger(tmp_path / "none", backends=[])
    none.log(10, {"train/loss": 0.5})
    none.close()
    assert sorted(p.name for p in (tmp_path / "none").iterdir()) == ["episodes.jsonl", "metrics.jsonl"]
    assert json.loads((tmp_path / "none" / "metrics.jsonl").read_text())["train/loss"] == 0.5


def test_an_unknown_backend_fails_at_start_up_naming_the_key():
    proc = run_train("logger.backends=[wandb,tensorbord]", timeout=60)
    assert proc.returncode == 2
    assert "error: config key 'logger.backends': allowed values are wandb, tensorboard (got 'tensorbord')" \
        in proc.stderr
