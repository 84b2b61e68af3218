"""Atomic checkpoints and the local metrics file / offline wandb run."""
from pathlib import Path

import pytest
import torch

from dreamer.io import checkpoint
from dreamer.io.metrics import MetricsLogger, read_metrics
from tests.helpers import live_children


def test_save_load_roundtrip_and_keep_last_k(tmp_path):
    for step in (100, 200, 300):
        checkpoint.save(tmp_path, step, {"w": torch.full((3,), float(step))}, keep=2)
    names = [p.name for p in checkpoint.list_checkpoints(tmp_path)]
    assert names == ["step_000000000200.pt", "step_000000000300.pt"]
    assert torch.equal(checkpoint.load(tmp_path)["w"], torch.full((3,), 300.0))
    assert not list(tmp_path.glob(".*tmp*")), "temporary files left behind"


def test_truncated_checkpoint_is_rejected(tmp_path):
    path = checkpoint.save(tmp_path, 1, {"w": torch.randn(1000)})
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(checkpoint.CheckpointError, match="truncated or corrupt"):
        checkpoint.load(path)


def test_foreign_file_is_rejected(tmp_path):
    torch.save({"w": 1}, tmp_path / "step_000000000001.pt")
    with pytest.raises(checkpoint.CheckpointError, match="not a dreamer-app checkpoint"):
        checkpoint.load(tmp_path)


def test_interrupted_save_leaves_previous_checkpoint(tmp_path, monkeypatch):
    checkpoint.save(tmp_path, 1, {"w": torch.ones(2)})

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.os, "replace", crash)
    with pytest.raises(KeyboardInterrupt):
        checkpoint.save(tmp_path, 2, {"w": torch.zeros(2)})
    monkeypatch.undo()
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["step_000000000001.pt"]
    assert torch.equal(checkpoint.load(tmp_path)["w"], torch.ones(2))
    assert not list(tmp_path.glob(".*tmp*"))


def test_empty_directory_has_clear_error(tmp_path):
    with pytest.raises(checkpoint.CheckpointError, match="no checkpoint"):
        checkpoint.load(tmp_path)


def test_metrics_file_and_offline_wandb(tmp_path):
    logger = MetricsLogger(tmp_path, backends=["wandb"], mode="offline", config={"seed": 1}, group="sweep-a")
    run_id = logger.run_id
    logger.log(10, {"loss": torch.tensor(1.5), "return": 3, "nan": float("nan")})
    logger.log(20, {"loss": 1.0})
    logger.close()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert rows == [{"step": 10, "loss": 1.5, "return": 3.0, "nan": None}, {"step": 20, "loss": 1.0}]
    offline = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}"))
    assert offline and (offline[0] / f"run-{run_id}.wandb").exists()
    assert live_children() == [], "wandb's service process outlived close()"


def test_metrics_without_wandb(tmp_path):
    logger = MetricsLogger(tmp_path, backends=[])
    logger.log(1, {"x": 2})
    logger.close()
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 1, "x": 2.0}]
    assert not (tmp_path / "wandb").exists()


def test_sigkill_during_a_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    """A real kill mid-write (not a mocked exception): only the temporary file is partial."""
    import signal
    import subprocess
    import sys
    import time

    checkpoint.save(tmp_path, 1, {"weights": torch.ones(3)})
    code = (f"import torch; from dreamer.io import checkpoint; "
            f"checkpoint.save({str(tmp_path)!r}, 2, {{'weights': torch.zeros(200_000_000, dtype=torch.uint8)}})")
    writer = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[1])
    deadline = time.monotonic() + 60
    while not list(tmp_path.glob(".step_*.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.01)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    assert list(tmp_path.glob(".step_*.tmp-*")), "the save finished before the kill: test did not run"
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path)] == ["step_000000000001.pt"]
    assert torch.equal(checkpoint.load(tmp_path)["weights"], torch.ones(3))
