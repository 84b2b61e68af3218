"""Checkpoints a user can trust: a crafted file runs nothing, older formats are named, a corrupt
newest file is skipped when resuming from a directory, and a full disk is one clear error."""
import contextlib
import errno
import os
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest
import torch

from dreamer.io import checkpoint
from dreamer.io.disk import DiskFullError, is_no_space
from dreamer.io.metrics import MetricsLogger
from tests.conftest import ROOT, run_train
from tests.helpers import live_children, processes_tagged


class RunsCode:
    """Unpickling this runs `touch <marker>` (what an attacker would put in a shared checkpoint)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def crafted_checkpoint(path: Path, marker: Path) -> Path:
    """A file with our format marker whose state carries a code-running pickle."""
    torch.save({"format": checkpoint.FORMAT, "step": 1, "state": {"loss": RunsCode(marker)}}, path)
    return path


def test_crafted_payload_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = crafted_checkpoint(tmp_path / "step_000000000001.pt", marker)
    for target in (path, tmp_path):  # a file, and a directory holding only that file
        with pytest.raises(checkpoint.CheckpointError, match="not a safe dreamer-app checkpoint") as err:
            checkpoint.load(target)
        assert "posix.system" in str(err.value) and "weights_only" not in str(err.value)
    assert not marker.exists(), "loading the checkpoint ran its code"


def test_old_full_pickle_format_is_named_not_loaded(tmp_path):
    """What dreamer-app wrote before the safe format: numpy RNG state and full pickles."""
    path = tmp_path / "step_000000000100.pt"
    torch.save({"format": "dreamer-app/checkpoint/v1", "step": 100,
                "state": {"rng": {"numpy": np.random.get_state()}}}, path)
    with pytest.raises(checkpoint.CheckpointError, match="predates the safe checkpoint format"):
        checkpoint.load(path)


def test_missing_state_keys_are_an_error_not_a_type_error(tmp_path):
    path = checkpoint.save(tmp_path, 5, {"loss": {}})
    with pytest.raises(checkpoint.CheckpointError, match="not a dreamer-app training checkpoint .no frames"):
        checkpoint.load(path, required=("loss", "frames"))


def test_directory_resume_skips_a_truncated_newest_with_a_warning(tmp_path):
    checkpoint.save(tmp_path, 100, {"w": torch.ones(3)}, keep=3)
    newest = checkpoint.save(tmp_path, 200, {"w": torch.zeros(1000)}, keep=3)
    newest.write_bytes(newest.read_bytes()[:500])
    warnings = []
    assert torch.equal(checkpoint.load(tmp_path, on_skip=warnings.append)["w"], torch.ones(3))
    assert len(warnings) == 1 and newest.name in warnings[0] and "step_000000000100.pt" in warnings[0]
    with pytest.raises(checkpoint.CheckpointError, match="truncated or corrupt"):
        checkpoint.load(newest)  # a file given explicitly is loaded as given


def test_directory_where_nothing_loads_lists_every_file(tmp_path):
    for step in (1, 2):
        (tmp_path / f"step_{step:012d}.pt").write_bytes(b"garbage")
    with pytest.raises(checkpoint.CheckpointError) as err:
        checkpoint.load(tmp_path, on_skip=lambda message: None)
    assert "no checkpoint in" in str(err.value)
    assert "step_000000000001.pt" in str(err.value) and "step_000000000002.pt" in str(err.value)


def test_rng_states_round_trip_through_a_safe_checkpoint(tmp_path):
    from dreamer.run.state import rng_state, set_rng_state

    torch.manual_seed(3), np.random.seed(4), random.seed(5)
    np.random.normal()  # leaves a cached gaussian in numpy's state
    path = checkpoint.save(tmp_path, 1, {"rng": rng_state()})
    expected = (torch.rand(3), np.random.rand(3), np.random.normal(), random.random())
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    set_rng_state(checkpoint.load(path)["rng"])
    got = (torch.rand(3), np.random.rand(3), np.random.normal(), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2:] == expected[2:]


# -- a full disk ------------------------------------------------------------------------------
@contextlib.contextmanager
def small_tmpfs(path: Path, size: str):
    """A real size-limited filesystem, where this machine lets the tests mount one."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); the injected-error tests cover this")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def fill(directory: Path) -> None:
    """Writes zeros until the filesystem is full."""
    with contextlib.suppress(OSError), open(directory / "filler", "wb") as f:
        while True:
            f.write(bytes(1 << 20))
            f.flush()


def test_checkpoint_on_a_full_disk_is_disk_full_error_and_leaves_no_temporary_file(tmp_path):
    with small_tmpfs(tmp_path / "fs", "1m") as fs:
        first = checkpoint.save(fs, 1, {"w": torch.ones(10)})
        with pytest.raises(DiskFullError) as err:
            checkpoint.save(fs, 2, {"w": torch.zeros(1_000_000)})  # 4 MB into 1 MB
        assert "disk full" in str(err.value) and "step_000000000002.pt" in str(err.value)
        assert sorted(p.name for p in fs.iterdir()) == [first.name], "a temporary or partial file was left"
        assert torch.equal(checkpoint.load(fs)["w"], torch.ones(10))


def test_checkpoint_disk_full_as_torch_reports_it_is_recognised(tmp_path, monkeypatch):
    """Without a mountable tmpfs: torch.save's RuntimeError raised while handling ENOSPC."""
    def save_fails(obj, f):
        f.write(b"partial")
        try:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")

    checkpoint.save(tmp_path, 1, {"w": torch.ones(1)})
    monkeypatch.setattr(checkpoint.torch, "save", save_fails)
    with pytest.raises(DiskFullError):
        checkpoint.save(tmp_path, 2, {"w": torch.ones(1)})
    assert [p.name for p in tmp_path.iterdir()] == ["step_000000000001.pt"]


def test_metrics_on_a_full_disk_is_disk_full_error_naming_the_file(tmp_path):
    with small_tmpfs(tmp_path / "fs", "64k") as fs:
        logger = MetricsLogger(fs, backends=[])
        fill(fs)
        with pytest.raises(DiskFullError) as err:
            for step in range(10_000):  # the file's buffer takes a few lines first
                logger.log(step, {"loss": 1.0})
        assert str(fs / "metrics.jsonl") in str(err.value)
        with pytest.raises(DiskFullError):
            logger.close()  # the lines still buffered cannot be flushed either
        logger.close()  # closed: a second close is quiet


def test_is_no_space_reads_the_whole_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError:
            raise RuntimeError("writer failed")
    except RuntimeError as err:
        assert is_no_space(err)
    assert is_no_space(BrokenPipeError(32, "ffmpeg: Error writing trailer: No space left on device"))
    assert not is_no_space(RuntimeError("other"))


# -- as users meet it: train.py and dreamer.evaluate in subprocesses ------------------------
QUICK = ("env=dmc_cartpole_balance", "env.action_repeat=8", "world_model=tiny", "collector.num_envs=2",
         "collector.transition_chunk_size=16", "replay.batch_size=4", "replay.batch_length=16",
         "replay.capacity=20000", "learner.prefill_frames=200", "learner.train_ratio=16", "logger.every=100",
         "eval.every=0", "checkpoint.every=200", "checkpoint.keep=1", "learner.compile=false")


@pytest.mark.slow
def test_train_and_evaluate_refuse_a_crafted_checkpoint_and_run_nothing(tmp_path):
    marker = tmp_path / "pwned"
    path = crafted_checkpoint(tmp_path / "shared.pt", marker)
    resumed = run_train(*QUICK, f"resume={path}", f"hydra.run.dir={tmp_path / 'run'}", timeout=120)
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    assert "not a safe dreamer-app checkpoint" in resumed.stderr and "Traceback" not in resumed.stderr
    evaluated = subprocess.run([sys.executable, "-m", "dreamer.evaluate", f"checkpoint={path}"], cwd=ROOT,
                               capture_output=True, text=True, timeout=120)
    assert evaluated.returncode == 1, evaluated.stderr[-2000:]
    assert "not a safe dreamer-app checkpoint" in evaluated.stderr and "Traceback" not in evaluated.stderr
    assert not marker.exists(), "a checkpoint given to the app ran its code"


def assert_one_line_disk_full_error(proc, run_dir: Path, tag: str) -> None:
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "leaked" not in proc.stderr, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "disk full" in errors[0] and str(run_dir) in errors[0], errors[0]
    newest = checkpoint.latest(run_dir / "checkpoints")
    assert newest is not None and f"last good checkpoint: {newest}" in errors[0], errors[0]
    assert checkpoint.load(newest)["frames"] > 0
    assert not [p for p in run_dir.rglob("*") if ".tmp" in p.name], "a temporary file was left"
    deadline = time.monotonic() + 10
    while processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_tagged(tag) == [], "processes outlived train.py"


@pytest.mark.slow
@pytest.mark.parametrize("where", ["metrics", "checkpoint"])
def test_disk_full_mid_run_injected_is_one_error_line_and_no_process(tmp_path, where):
    """The disk 'fills' after the first checkpoint: in metrics.jsonl, or in the next checkpoint."""
    run_dir, tag = tmp_path / "run", uuid.uuid4().hex
    env = dict(os.environ, HYDRA_FULL_ERROR="0", WANDB_SILENT="true", DREAMER_TEST_TAG=tag)
    proc = subprocess.run([sys.executable, "-m", "tests.full_disk_run", where, *QUICK,
                           "collector.total_frames=100000", f"hydra.run.dir={run_dir}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert_one_line_disk_full_error(proc, run_dir, tag)
    assert ("metrics.jsonl" if where == "metrics" else "checkpoints/step_") in proc.stderr


@pytest.mark.slow
def test_disk_full_mid_run_on_a_real_tmpfs(tmp_path):
    """A 256 MB filesystem (the start-up check wants room for 2 checkpoints), filled after the first one."""
    with small_tmpfs(tmp_path / "fs", "256m") as fs:
        run_dir, tag = fs / "run", uuid.uuid4().hex
        env = dict(os.environ, HYDRA_FULL_ERROR="0", WANDB_SILENT="true", DREAMER_TEST_TAG=tag)
        proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *QUICK, "collector.total_frames=100000",
                                 f"hydra.run.dir={run_dir}"], cwd=ROOT, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 240
        while checkpoint.latest(run_dir / "checkpoints") is None and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint within 240 s"
            time.sleep(0.2)
        fill(fs)
        try:
            stdout, stderr = proc.communicate(timeout=240)
        finally:
            if proc.poll() is None:
                proc.kill()
        proc.stdout, proc.stderr = stdout, stderr
        assert_one_line_disk_full_error(proc, run_dir, tag)
        assert live_children() == []
