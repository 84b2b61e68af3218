"""replay.storage=disk: torchrl's memory-mapped storage per env stream, checkpoints that locate the
files, resume that reopens them, and what a kill after a checkpoint leaves (replay/disk.py)."""
import os

import pytest
import torch

from replay import disk as replay_disk
from replay.buffer import SequenceReplay
from tests.helpers import transitions


def filled(directory, steps=(40, 30), capacity=200):
    replay = SequenceReplay(2, capacity, 2, 8, directory=directory)
    for env, n in enumerate(steps):
        for start in range(0, n, 10):
            replay.extend(transitions(env, start, 10))
    return replay


def test_disk_streams_hold_what_memory_streams_hold(tmp_path):
    disk, memory = filled(tmp_path / "replay"), SequenceReplay(2, 200, 2, 8)
    for env, n in enumerate((40, 30)):
        for start in range(0, n, 10):
            memory.extend(transitions(env, start, 10))
    assert len(disk) == len(memory) == 70
    for env in range(2):
        assert (disk.stream(env) == memory.stream(env)).all()
    assert (tmp_path / "replay" / "env0" / "meta.json").exists()  # tensordict's memory-mapped files
    batch = disk.sample()
    assert batch.shape == (2, 8) and batch["observation"].dtype == torch.float32


def test_a_checkpoint_locates_the_files_and_a_resume_reopens_them(tmp_path):
    replay = filled(tmp_path / "run" / "replay")
    state = replay_disk.checkpoint_state(replay, tmp_path / "run" / "replay", tmp_path / "run")
    assert state["dir"] == "replay" and [s["length"] for s in state["streams"]] == [40, 30]
    assert len(repr(state)) < 10_000  # numbers and names, not data
    resumed = SequenceReplay(2, 200, 2, 8, directory=tmp_path / "run" / "replay")
    assert replay_disk.reopen(resumed, state, replay_disk.resolve_dir(state, tmp_path / "run")) == [0, 0]
    for env in range(2):
        assert (resumed.stream(env) == replay.stream(env)).all()
    resumed.extend(transitions(0, 40, 10))  # writing goes on at the checkpoint's cursor
    assert resumed.sizes() == [50, 30] and (resumed.stream(0)[40:] == transitions(0, 40, 10)["observation"].shape[0:1]
                                            or True)
    assert torch.equal(resumed.stream(0)["observation"][40:], transitions(0, 40, 10)["observation"])


def test_records_written_after_the_checkpoint_are_ignored_and_a_wrapped_junction_starts_an_episode(tmp_path):
    directory = tmp_path / "replay"
    replay = filled(directory, steps=(40, 30), capacity=80)  # 40 per stream: stream 0 is full
    state = replay_disk.checkpoint_state(replay, directory, tmp_path)
    replay.extend(transitions(0, 40, 10))  # after the checkpoint, then the process is killed
    replay.extend(transitions(1, 30, 5))
    resumed = SequenceReplay(2, 80, 2, 8, directory=directory)
    assert replay_disk.reopen(resumed, state, directory) == [10, 5]
    assert resumed.sizes() == [40, 30]  # the checkpoint's lengths
    # stream 0 wrapped: its 10 oldest records were overwritten; the first survivor starts an episode
    stored = resumed.member(0).storage._storage
    assert bool(stored["is_init"][10]) and int(resumed.member(0)._writer._cursor) == 0
    # stream 1 had room: its late records lie past its length, nothing older was touched
    assert not resumed.member(1).storage._storage["is_init"][:30].reshape(-1)[1:].any()
    assert replay_disk.read_journal(directory / "env0" / replay_disk.JOURNAL) == state["streams"][0]["written"]


@pytest.mark.parametrize("damage", ["missing", "truncated", "other"])
def test_damaged_replay_files_fail_with_one_line_naming_the_file(tmp_path, damage):
    directory = tmp_path / "replay"
    replay = filled(directory)
    state = replay_disk.checkpoint_state(replay, directory, tmp_path)
    target = directory / "env1" / "observation.memmap"
    if damage == "missing":
        target.unlink()
    elif damage == "truncated":
        target.write_bytes(target.read_bytes()[:100])
    else:
        state["streams"][1]["length"] += 1  # a checkpoint that is not these files'
    with pytest.raises(replay_disk.ReplayFilesError) as err:
        replay_disk.reopen(SequenceReplay(2, 200, 2, 8, directory=directory), state, directory)
    message = str(err.value)
    assert "\n" not in message
    if damage == "other":
        assert "do not match the checkpoint" in message
    else:
        assert str(target) in message and ("missing" in message if damage == "missing" else "truncated" in message)


def test_a_new_run_refuses_replay_files_already_in_its_dir(tmp_path):
    filled(tmp_path / "replay")
    with pytest.raises(Exception, match="exist"):
        filled(tmp_path / "replay")


def test_a_disk_run_resumes_its_replay_and_makes_the_same_update(tmp_path):
    """The exact-resume test (tests/test_loop.py) on disk storage: the files are reopened, not copied."""
    from dreamer.config import validate
    from dreamer.run.app import load_resume_state
    from dreamer.run.trainer import Trainer
    from tests.helpers import SMALL, composed

    disk = (*SMALL, "replay.storage=disk")
    original = Trainer(validate(composed(*disk)), tmp_path)
    for env in range(2):
        original.replay.member(env).extend(transitions(env, 0, 40))
    for _ in range(3):  # with the context write-back into the files
        original.update(push=False)
    path = original.save_checkpoint()
    assert path.stat().st_size < 2 * 2**20 and (tmp_path / "replay" / "env0" / "meta.json").exists()
    batch = original.replay.sample()
    torch.manual_seed(123)
    expected = original.learner.step(batch)

    state = load_resume_state(validate(composed(*disk, f"resume={path}")))
    assert state["replay_dir"] == tmp_path / "replay" and state["replay"] is None
    resumed = Trainer(validate(composed(*disk)), tmp_path, resume=state)
    assert resumed.updates == 3 and resumed.replay.sizes() == [40, 40]
    torch.manual_seed(123)
    assert resumed.learner.step(batch) == expected
    for (name, p), q in zip(original.agent.loss.named_parameters(), resumed.agent.loss.parameters()):
        assert torch.equal(p, q), name


def test_a_resume_with_damaged_files_is_one_config_error_or_goes_on_without_the_replay(tmp_path):
    from dreamer.config import ConfigError, validate
    from dreamer.run.app import load_resume_state
    from dreamer.run.trainer import Trainer
    from tests.helpers import SMALL, composed

    disk = (*SMALL, "replay.storage=disk")
    trainer = Trainer(validate(composed(*disk)), tmp_path)
    trainer.replay.member(0).extend(transitions(0, 0, 40))
    path = trainer.save_checkpoint()
    (tmp_path / "replay" / "env0" / "reward.memmap").unlink(missing_ok=True)
    (tmp_path / "replay" / "env0" / "next" / "reward.memmap").unlink(missing_ok=True)
    with pytest.raises(ConfigError) as err:
        load_resume_state(validate(composed(*disk, f"resume={path}")))
    assert err.value.key == "resume" and "is missing" in str(err.value) and "checkpoint.replay=false" in str(err.value)
    state = load_resume_state(validate(composed(*disk, f"resume={path}", "checkpoint.replay=false")))
    assert state.get("replay_dir") is None and state["replay_disk"] is None  # refills, as without replay


@pytest.mark.slow
def test_train_py_on_disk_keeps_small_checkpoints_survives_sigkill_and_resumes_its_replay(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from dreamer.io import checkpoint
    from dreamer.io.metrics import read_metrics
    from tests.conftest import ROOT, run_train

    args = ("env=dmc_cartpole_balance_pixels", "env.fast_visuals=true", "world_model=tiny", "collector.num_envs=2",
            "replay.storage=disk", "replay.batch_size=2", "replay.batch_length=8", "learner.train_ratio=8",
            "learner.prefill_frames=100", "learner.compile=false", "replay.prefetch=1", "logger=none",
            "eval.every=0", "checkpoint.every=800", "replay.capacity=20000")
    first = tmp_path / "first"
    proc = subprocess.Popen([sys.executable, "train.py", *args, "collector.total_frames=100000",
                             f"hydra.run.dir={first}"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 400  # bounds a hang only
        while checkpoint.latest(first / "checkpoints") is None and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.5)
        written = [s["written"] for s in checkpoint.load(checkpoint.latest(first / "checkpoints"))["replay_disk"]["streams"]]
        journals = [first / "replay" / f"env{e}" / replay_disk.JOURNAL for e in range(2)]
        while all(replay_disk.read_journal(j) <= w for j, w in zip(journals, written)) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            time.sleep(0.2)  # until it writes records after the checkpoint
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole tree: driver, workers, server
        proc.wait()
    saved = checkpoint.latest(first / "checkpoints")
    state = checkpoint.load(saved)
    stored = sum(s["length"] for s in state["replay_disk"]["streams"])
    # networks and optimizer only (~4 MB for the tiny model): the replay's records are in the files
    assert saved.stat().st_size < 6 * 2**20 and stored >= state["frames"] >= 800
    assert stored * 12_000 > 2 * saved.stat().st_size  # 64x64 RGB records: what a memory checkpoint would hold

    second = tmp_path / "second"
    total = state["frames"] + 128
    resumed = run_train(*args, f"collector.total_frames={total}", f"resume={first / 'checkpoints'}",
                        f"hydra.run.dir={second}", "logger.every=64", timeout=400)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at {state['frames']} env steps, {state['updates']} updates" in resumed.stdout
    assert f"on disk in {first / 'replay'} (the checkpoint's files)" in resumed.stdout
    assert "written after the checkpoint are ignored" in resumed.stderr + resumed.stdout
    episodes = len((second / "episodes.jsonl").read_text().splitlines())
    final = read_metrics(second / "metrics.jsonl")[-1]
    # the checkpoint's records, the new steps, one final-observation record per finished episode
    assert final["replay/size"] == stored + 128 + episodes
