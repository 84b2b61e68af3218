"""Faults an env brings, as a user meets them in `python train.py env=gym env.id=their:Env-v0`: a NaN or
inf observation, a NaN reward. Each ends the run with one `error:` line naming the key, the worker,
its env step and the task, a loadable checkpoint and no process left; env.nonfinite=zero trains on."""
import time
import uuid

import pytest

from dreamer.io import checkpoint
from dreamer.io.metrics import read_metrics
from tests.conftest import run_train
from tests.helpers import processes_tagged

SHORT = ("world_model=tiny", "collector.num_envs=2", "collector.transition_chunk_size=8", "replay.batch_size=2",
         "replay.batch_length=8", "learner.train_ratio=8", "learner.prefill_frames=40", "logger=none",
         "env=gym", "eval.every=0",
         # a batch reaches replay every 16 transitions: with the collector's 4 result slots, some
         # have whenever an env worker is at its step 60, however slow the other one is
         "collector.frames_per_batch=16")


def faulty_run(fault: str, run_dir, *extra: str):
    tag = uuid.uuid4().hex
    proc = run_train(*SHORT, f"env.id=tests.gym_envs:DreamerTest/Faulty-{fault}-v0", f"hydra.run.dir={run_dir}",
                     *extra, timeout=300, env_extra={"DREAMER_TEST_TAG": tag})
    deadline = time.monotonic() + 10  # bounds a hang only
    while processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_tagged(tag) == [], "processes outlived train.py"
    return proc


@pytest.mark.slow
@pytest.mark.parametrize("fault, value, key", [("nan_obs", "nan", "observation"), ("inf_obs", "inf", "observation"),
                                               ("nan_reward", "nan", "reward")])
def test_a_non_finite_value_from_the_env_stops_the_run_with_one_line(tmp_path, fault, value, key):
    proc = faulty_run(fault, tmp_path, "collector.total_frames=400")
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"env.nonfinite: {value} in {key} from env worker " in errors[0]
    assert f"(gym_tests.gym_envs:DreamerTest/Faulty-{fault}-v0) at env step 60" in errors[0]
    assert "last good checkpoint:" in errors[0] and "env.nonfinite=zero" in errors[0]
    state = checkpoint.load(checkpoint.latest(tmp_path / "checkpoints"))
    assert 0 < state["frames"] < 400


@pytest.mark.slow
def test_nonfinite_zero_replaces_and_counts_them_and_the_run_finishes(tmp_path):
    proc = faulty_run("nan_obs", tmp_path, "collector.total_frames=300", "env.nonfinite=zero", "logger.every=100")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "trained to 300 env steps" in proc.stdout
    counts = [r["collect/nonfinite_values"] for r in read_metrics(tmp_path / "metrics.jsonl")
              if "collect/nonfinite_values" in r]
    # from step 60 on, one value per step per env: counted, and counting up
    assert counts and counts[-1] > 0 and counts == sorted(counts)


def hanging_run(hang: str, run_dir, *extra: str):
    tag = uuid.uuid4().hex
    started = time.monotonic()
    proc = run_train(*SHORT, f"env.id=tests.gym_envs:DreamerTest/{hang}-v0", f"hydra.run.dir={run_dir}",
                     "collector.total_frames=100000", "collector.env_timeout_s=10", "checkpoint.every=40",
                     "learner.compile=false",
                     *extra, timeout=600, env_extra={"DREAMER_TEST_TAG": tag})
    deadline = time.monotonic() + 10  # bounds a hang only
    while processes_tagged(tag) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_tagged(tag) == [], "processes outlived train.py"
    return proc, time.monotonic() - started


@pytest.mark.slow
@pytest.mark.parametrize("hang", ["step", "reset"])
def test_an_env_stuck_in_step_or_reset_ends_the_run_naming_it(tmp_path, hang):
    proc, _ = hanging_run(f"Hang-{hang}", tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    call = "step()" if hang == "step" else "reset()"
    assert f"(gym_tests.gym_envs:DreamerTest/Hang-{hang}-v0) (pid " in errors[0], errors[0]
    assert f"has not returned from {call} for " in errors[0] and "(collector.env_timeout_s=10)" in errors[0]
    # the final checkpoint, or, when the main thread does not reach a stop point within the
    # watchdog's 30 s (a learner update on a busy machine), the periodic one, said as such
    assert ("last good checkpoint:" in errors[0]
            or "so no final checkpoint was written: the last one in the run's checkpoints/ resumes it" in errors[0]), errors[0]
    state = checkpoint.load(checkpoint.latest(tmp_path / "checkpoints"))
    assert state["frames"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("native", [False, True])
def test_an_evaluation_env_stuck_in_step_ends_the_run_naming_it(tmp_path, native):
    """The evaluation env runs in the training process: a hang in Python is interrupted (final
    checkpoint); one in native code, which never returns to the interpreter, exits from the watchdog."""
    env_id = f"Hang-eval{'-native' if native else ''}"
    proc, _ = hanging_run(env_id, tmp_path, "eval.every=80", "eval.video=false")
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"error: the evaluation env (gym_tests.gym_envs:DreamerTest/{env_id}-v0) (pid " in errors[0], errors[0]
    assert "has not returned from step() for " in errors[0] and "(collector.env_timeout_s=10)" in errors[0]
    assert "after 4 env steps; the run stops" in errors[0], errors[0]
    frames = checkpoint.load(checkpoint.latest(tmp_path / "checkpoints"))["frames"]
    if native:  # the periodic checkpoint (checkpoint.every=40) before the evaluation at 80
        assert "no final checkpoint was written" in errors[0] and 0 < frames < 80, (errors[0], frames)
    else:  # the final checkpoint, at the evaluation
        assert "last good checkpoint:" in errors[0] and frames >= 80, (errors[0], frames)


@pytest.mark.slow
@pytest.mark.parametrize("fault, what", [
    ("shape", "the observation has shape (5,); its space says (4,)"),
    ("dtype", "the observation has dtype float32; its space says uint8")])
def test_an_observation_that_changes_shape_or_dtype_stops_the_run_with_one_line(tmp_path, fault, what):
    extra = ("env.obs=pixels", "env.image_size=16") if fault == "dtype" else ()
    proc = faulty_run(fault, tmp_path, "collector.total_frames=400", "learner.compile=false", *extra)
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert f"error: env spec changed: {what}, from env worker " in errors[0], errors[0]
    assert f"(gym_tests.gym_envs:DreamerTest/Faulty-{fault}-v0) at env step 60;" in errors[0], errors[0]
    assert "last good checkpoint:" in errors[0]
    assert 0 < checkpoint.load(checkpoint.latest(tmp_path / "checkpoints"))["frames"] < 400


@pytest.mark.slow
def test_an_exception_from_the_env_is_one_line_and_its_traceback_goes_to_train_log(tmp_path):
    proc = faulty_run("raise", tmp_path, "collector.total_frames=400", "learner.compile=false")
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert ("(gym_tests.gym_envs:DreamerTest/Faulty-raise-v0) raised ValueError: the simulator lost its "
            "connection in step() at env step 60; its traceback: ") in errors[0], errors[0]
    log = (tmp_path / "train.log").read_text()
    assert 'raise ValueError("the simulator lost its connection")' in log  # the env's own line
    assert "Traceback" in log and "An environment worker failed" in log  # and the driver's
    assert 0 < checkpoint.load(checkpoint.latest(tmp_path / "checkpoints"))["frames"] < 400


@pytest.mark.slow
def test_hydra_full_error_shows_the_traceback_on_the_terminal_too(tmp_path):
    tag = uuid.uuid4().hex
    proc = run_train(*SHORT, "env.id=tests.gym_envs:DreamerTest/Faulty-nan_obs-v0", f"hydra.run.dir={tmp_path}",
                     "collector.total_frames=400", "learner.compile=false", timeout=300,
                     env_extra={"DREAMER_TEST_TAG": tag, "HYDRA_FULL_ERROR": "1"})
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr and proc.stderr.strip().splitlines()[-1].startswith("error: env.nonfinite"), \
        proc.stderr[-2000:]
