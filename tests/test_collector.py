"""The chunked process-slot collector writing into per-env replay (real workers, real DMC)."""
import time

import pytest
from omegaconf import OmegaConf

from collectors.collector import CollectorSetupError, RandomPolicyFactory, build_collector
from collectors.envs import env_factory
from replay.buffer import SequenceReplay
from tests.helpers import (
    assert_sequences_consistent, assert_stream_in_order, live_children,
)

# action_repeat 8: 125-step episodes, so a short collection holds episode boundaries.
ENV = OmegaConf.create(dict(domain="cartpole", task="balance", obs="proprio", image_size=64,
                            action_repeat=8, camera=None, fast_visuals=False))
TOTAL = 650  # not a multiple of frames_per_batch nor of the chunk size


def collect(chunk: int, transport: str = "process_slot", num_envs: int = 2):
    replay = SequenceReplay(num_envs, capacity=4000, batch_size=6, batch_length=10)
    collector = build_collector(
        [env_factory(ENV, seed=i) for i in range(num_envs)], RandomPolicyFactory(1),
        frames_per_batch=64, total_frames=TOTAL, chunk_size=chunk, transport=transport, replay=replay)
    try:
        backend = collector.server_backend
        for _ in collector:
            pass
    finally:
        collector.shutdown()
    return replay, backend


@pytest.fixture(scope="module", params=[1, 16], ids=["chunk1", "chunk16"])
def collected(request):
    return collect(request.param)


def test_frame_budget_is_met_exactly(collected):
    replay, backend = collected
    assert backend == "process"
    assert len(replay) == TOTAL


def test_each_env_stream_is_stored_in_order(collected):
    replay, _ = collected
    assert all(size > 0 for size in replay.sizes())
    for env in range(replay.num_envs):
        stream = replay.stream(env)
        assert (stream["env_index"] == env).all()
        assert_stream_in_order(stream)
    assert replay.stream(0)["is_init"].sum() >= 2, "expected an episode boundary in the stream"


def test_sampled_sequences_stay_in_one_env_and_mark_episode_starts(collected):
    replay, _ = collected
    for _ in range(30):
        assert_sequences_consistent(replay.sample())


def test_no_worker_left_after_shutdown(collected):
    assert live_children() == []


def test_thread_transport_collects_too():
    replay, backend = collect(chunk=1, transport="thread")
    assert backend == "thread" and len(replay) == TOTAL
    assert live_children() == []


def test_static_batch_on_cpu_is_refused_before_any_process_starts():
    before = len(live_children())
    with pytest.raises(CollectorSetupError, match="inference_static_batch_size"):
        build_collector([env_factory(ENV, seed=0)], RandomPolicyFactory(1), frames_per_batch=8,
                        total_frames=8, chunk_size=1, static_batch_size=1, policy_device="cpu")
    assert len(live_children()) == before


class ExplodingEnvFactory:
    def __call__(self):
        raise RuntimeError("env construction failed on purpose")


def test_worker_failure_raises_and_leaves_no_process():
    # A budget the healthy env cannot finish alone before the failure surfaces (64 frames raced it).
    collector = build_collector([env_factory(ENV, seed=0), ExplodingEnvFactory()], RandomPolicyFactory(1),
                                frames_per_batch=16, total_frames=1_000_000, chunk_size=4)
    with pytest.raises(RuntimeError):
        try:
            for _ in collector:
                pass
        finally:
            collector.shutdown(raise_on_error=False)
    assert live_children() == []


class FailsMidEpisodeFactory:
    """An env that raises on its 30th step (mid-episode: episodes here are 125 steps)."""

    def __call__(self):
        from torchrl.envs import Transform

        class RaiseAt(Transform):
            def __init__(self):
                super().__init__()
                self.steps = 0

            def _step(self, tensordict, next_tensordict):
                self.steps += 1
                if self.steps == 30:
                    raise RuntimeError("env failed mid-episode on purpose")
                return next_tensordict

        env = env_factory(ENV, seed=1)()
        env.append_transform(RaiseAt())
        return env


def test_env_raising_mid_episode_raises_and_leaves_no_process():
    collector = build_collector([env_factory(ENV, seed=0), FailsMidEpisodeFactory()], RandomPolicyFactory(1),
                                frames_per_batch=16, total_frames=1_000_000, chunk_size=4)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as err:
        try:
            for _ in collector:
                pass
        finally:
            collector.shutdown(raise_on_error=False)
    assert time.monotonic() - start < 60
    chain = []
    e = err.value
    while e is not None:
        chain.append(str(e))
        e = e.__cause__ or e.__context__
    assert any("worker" in m for m in chain), chain
    assert live_children() == []
