"""Faults an env brings, as a user meets them in `python train.py env=gym env.id=their:Env-v0`: a NaN or
inf observation, a NaN reward. Each ends the run with one `error:` line naming the key, the worker,
its env step and the task, a loadable checkpoint and no process left; env.nonfinite=zero trains on."""
import time
import uuid

import pytest

from dreamer import checkpoint
from dreamer.metrics import read_metrics
from tests.conftest import run_train
from tests.helpers import processes_tagged

SHORT = ("world_model=tiny", "collector.num_envs=2", "collector.transition_chunk_size=8", "replay.batch_size=2",
         "replay.batch_length=8", "learner.train_ratio=8", "learner.prefill_frames=40", "logger=none",
         "env=gym", "eval.every=0")


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
