"""The training loop's parts without processes: train-ratio arithmetic, episode tracking, exact resume."""
import math

import pytest
import torch

from collectors.episodes import EpisodeTracker
from dreamer.agent.learner import MetricWindow
from dreamer.config import ConfigError, validate
from dreamer.io import checkpoint
from dreamer.run.app import load_resume_state
from dreamer.run.trainer import Trainer
from tests.helpers import SMALL, composed, transitions


def test_episode_tracker_sums_returns_per_env_across_chunks():
    tracker = EpisodeTracker()
    a, b = transitions(0, 0, 6, done_at=5), transitions(1, 0, 4)
    tracker(torch.cat([a[:3], b]))  # interleaved chunks of two envs
    tracker(a[3:])
    assert tracker.frames == 10 and tracker.episodes == 1
    (ret, length), = tracker.pop_finished()
    assert length == 6 and ret == pytest.approx(float(a["next", "reward"].sum()))
    assert tracker.pop_finished() == []


def test_train_ratio_sets_the_number_of_updates(tmp_path):
    trainer = Trainer(validate(composed(*SMALL)), tmp_path)
    for env in range(2):
        trainer.replay.member(env).extend(transitions(env, 0, 50))
    # batch 4 x 8 = 32 replayed steps per update; ratio 16 -> one update per 2 env steps after prefill
    assert trainer.steps_per_update == 2
    assert trainer.target_updates(99) == 0
    assert trainer.target_updates(100) == 1
    assert trainer.target_updates(120) == 11


def test_resumed_learner_makes_the_same_update(tmp_path):
    """Save after a few updates, restore into a fresh Trainer: the next update on the same sample
    (same RNG draw) gives the same losses and the same parameters as the uninterrupted one."""
    config = validate(composed(*SMALL))
    original = Trainer(config, tmp_path)
    for env in range(2):
        original.replay.member(env).extend(transitions(env, 0, 40))
    for _ in range(3):
        original.learner.step(original.replay.sample())
    path = original.save_checkpoint()  # through the file, as a resumed run reads it
    batch = original.replay.sample()

    torch.manual_seed(123)
    expected = original.learner.step(batch)
    torch.manual_seed(999)  # a different process state before building the resumed trainer
    resumed = Trainer(config, tmp_path, resume=checkpoint.load(path))
    assert resumed.updates == 3 and resumed.frames == 0
    for env in range(2):
        assert (resumed.replay.stream(env) == original.replay.stream(env)).all()
    torch.manual_seed(123)
    got = resumed.learner.step(batch)
    assert got == expected
    for (name, p), q in zip(original.agent.loss.named_parameters(), resumed.agent.loss.parameters()):
        assert torch.equal(p, q), name
    for (name, b), c in zip(original.agent.loss.named_buffers(), resumed.agent.loss.buffers()):
        assert torch.equal(b, c), name


def test_resume_with_another_env_count_fails_at_start_up_naming_the_key(tmp_path):
    trainer = Trainer(validate(composed(*SMALL)), tmp_path)
    trainer.replay.member(0).extend(transitions(0, 0, 20))
    path = trainer.save_checkpoint()  # holds one replay stream per env
    with pytest.raises(ConfigError) as err:
        load_resume_state(validate(composed(*SMALL, "collector.num_envs=3", f"resume={path}")))
    assert err.value.key == "collector.num_envs"
    assert load_resume_state(validate(composed(*SMALL, f"resume={path}")))["frames"] == 0


def test_non_finite_updates_are_skipped_then_stop_the_run(tmp_path):
    from dreamer.run.updates import NonFiniteLossError

    trainer = Trainer(validate(composed(*SMALL, "learner.max_nonfinite_updates=3")), tmp_path)
    trainer.collection.stopped = True  # no collector here: weight pushes are no-ops
    for env in range(2):
        bad = transitions(env, 0, 40)
        bad["next", "reward"][:] = float("nan")
        trainer.replay.member(env).extend(bad)
    before = [p.clone() for p in trainer.agent.loss.parameters()]
    window = MetricWindow()
    for expected_skips in (1, 2):
        metrics = trainer.update()
        assert metrics["skipped_updates"] == expected_skips
        window.add(metrics)
    logged = window.reduce()
    assert logged["skipped_updates"] == 1.5 and all(math.isfinite(v) for v in logged.values())  # NaNs left out
    assert all(torch.equal(p, q) for p, q in zip(before, trainer.agent.loss.parameters())), "a NaN step was applied"
    with pytest.raises(NonFiniteLossError, match="learner.max_nonfinite_updates"):
        trainer.update()
    assert all(torch.isfinite(p).all() for p in trainer.agent.loss.parameters())


def test_metrics_stay_on_the_device_and_are_reduced_once_per_window():
    window = MetricWindow()
    for loss in (1.0, float("nan"), 3.0):
        window.add({"loss": torch.tensor(loss), "lr": torch.tensor(0.5)})
    assert isinstance(window.sums["loss"], torch.Tensor)  # no float() per update
    assert window.reduce() == {"loss": 2.0, "lr": 0.5}  # the NaN is left out of the mean
    assert window.reduce() == {}  # a new window
    window.add({"loss": torch.tensor(float("inf"))})
    assert window.reduce() == {}  # no finite value: no mean


def test_a_finite_update_resets_the_non_finite_streak(tmp_path):
    trainer = Trainer(validate(composed(*SMALL, "learner.max_nonfinite_updates=2")), tmp_path)
    trainer.collection.stopped = True
    for env in range(2):
        trainer.replay.member(env).extend(transitions(env, 0, 40))
    trainer.step.nonfinite_in_row = 1
    metrics = trainer.update()
    assert trainer.step.nonfinite_in_row == 0 and metrics["skipped_updates"] == 0


def raise_at_step(n: int):
    """An env transform raising on its n-th step: an env failing mid-episode inside a worker."""
    from torchrl.envs import Transform

    class RaiseAtStep(Transform):
        steps = 0

        def _step(self, tensordict, next_tensordict):
            self.steps += 1
            if self.steps == n:
                raise RuntimeError("env failed mid-episode on purpose")
            return next_tensordict

    return RaiseAtStep()


class FailingEnvFactory:
    def __init__(self, inner, n: int):
        self.inner, self.n = inner, n

    def __call__(self):
        env = self.inner()
        env.append_transform(raise_at_step(self.n))
        return env


@pytest.mark.slow
def test_env_failing_mid_episode_stops_training_with_a_checkpoint_and_no_process(tmp_path, monkeypatch):
    import dreamer.run.collection as collection_module
    import dreamer.run.loop as loop
    from tests.helpers import live_children

    real = collection_module.env_factory

    def second_env_fails(env_cfg, seed, extra_transform=None, **kwargs):
        factory = real(env_cfg, seed=seed, extra_transform=extra_transform, **kwargs)
        return FailingEnvFactory(factory, 150) if seed % 10_000 == 1 else factory

    monkeypatch.setattr(collection_module, "env_factory", second_env_fails)
    config = validate(composed(*SMALL, "collector.total_frames=100000", "eval.every=0", "checkpoint.every=0", "learner.compile=false"))
    with pytest.raises(RuntimeError) as err:
        loop.train(config, tmp_path)
    messages = []
    e = err.value
    while e is not None:
        messages.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("worker" in m or "mid-episode" in m for m in messages), messages
    state = checkpoint.load(tmp_path / "checkpoints")
    assert state["frames"] >= 100
    assert live_children() == []


def test_collection_is_not_paused_or_resumed_once_the_collector_is_stopped():
    """After a kill (a lost rank) the collector's processes are gone: touching them must not fail."""
    from types import SimpleNamespace

    from dreamer.run.collection import Collection

    class Untouchable:
        def __getattr__(self, name):
            raise AssertionError(f"the stopped collector was used: {name}")

    collection = SimpleNamespace(stopped=True, collector=Untouchable(), watchdog=Untouchable(),
                                 frames=lambda: 0, config=SimpleNamespace(collector=SimpleNamespace(total_frames=10)),
                                 _paused=Untouchable())
    Collection.hold(collection, True)
    Collection.hold(collection, False)
    assert collection._paused is None
