"""SequenceReplay without a collector: routing, wrap-around, sampling."""
import pytest
import torch
from tensordict import TensorDict

from patches.storage import CompileSafeStorage
from replay.buffer import SequenceReplay
from tests.conftest import ROOT
from tests.helpers import assert_sequences_consistent, assert_stream_in_order


def fake_chunk(env: int, start: int, n: int, episode_len: int) -> TensorDict:
    steps = torch.arange(start, start + n) % episode_len
    return TensorDict({
        "env_index": torch.full((n,), env),
        "step_count": steps.unsqueeze(-1),
        "is_init": (steps == 0).unsqueeze(-1),
        "observation": torch.randn(n, 3),
    }, batch_size=[n])


def interleaved_chunks(num_envs=3, chunks=12, chunk=5, episode_len=17):
    cursor = [0] * num_envs
    for i in range(chunks):
        for env in range(num_envs):
            if (i + env) % 3 == 0:  # uneven pace per env, as chunked workers deliver
                continue
            yield fake_chunk(env, cursor[env], chunk, episode_len)
            cursor[env] += chunk


def test_routes_by_env_and_counts_transitions_not_members():
    replay = SequenceReplay(num_envs=3, capacity=3000, batch_size=4, batch_length=6)
    total = 0
    for chunk in interleaved_chunks():
        replay.extend(chunk)
        total += chunk.numel()
    assert len(replay) == total and sum(replay.sizes()) == total
    for env in range(3):
        stream = replay.stream(env)
        assert (stream["env_index"] == env).all()
        assert_stream_in_order(stream)


def test_samples_never_cross_envs_or_unmarked_episode_ends():
    replay = SequenceReplay(num_envs=3, capacity=3000, batch_size=8, batch_length=6)
    for chunk in interleaved_chunks():
        replay.extend(chunk)
    for _ in range(50):
        batch = replay.sample()
        assert batch.shape == (8, 6)
        assert_sequences_consistent(batch)


def test_sampled_starts_are_not_marked_as_episode_starts():
    # SliceSampler's default init_key would set is_init at every slice start.
    replay = SequenceReplay(num_envs=1, capacity=1000, batch_size=16, batch_length=5)
    replay.extend(fake_chunk(0, 1, 400, episode_len=1000))  # one long episode, no reset in it
    for _ in range(10):
        assert not replay.sample()["is_init"].any()


def test_ring_wraparound_keeps_sequences_contiguous():
    replay = SequenceReplay(num_envs=2, capacity=40, batch_size=8, batch_length=6)  # 20 per env
    for chunk in interleaved_chunks(num_envs=2, chunks=20, chunk=7, episode_len=9):
        replay.extend(chunk)
    assert replay.sizes() == [20, 20]
    for env in range(2):
        assert_stream_in_order(replay.stream(env))
    for _ in range(50):
        assert_sequences_consistent(replay.sample())


def test_records_from_a_real_collector_bytes_and_final_observation():
    """What a real pixel env's collector run stores: uint8 pixels at t only (no next-pixel copy),
    the compressed latent context, and one final-observation record after the episode's last step.
    The bytes per record are exactly the start-up RAM check's estimate."""
    from omegaconf import OmegaConf

    from collectors.collector import build_collector
    from collectors.envs import env_factory
    from collectors.envs.dmc import task_dims
    from collectors.specs import bytes_per_transition, context_bytes
    from dreamer.agent.obs import ObsSpec
    from dreamer.agent.policy import DreamerPolicyFactory, primer_factory
    from dreamer.config import WorldModelConfig
    from replay.records import ContextSpec, ReplayRecords

    env_cfg = OmegaConf.create(dict(domain="cartpole", task="balance", obs="pixels", image_size=64,
                                    action_repeat=8, camera=None, fast_visuals=True))  # 125-step episodes
    wm = OmegaConf.merge(OmegaConf.structured(WorldModelConfig), OmegaConf.load(ROOT / "conf/world_model/tiny.yaml"))
    obs, adim = ObsSpec.from_env("pixels", 64), task_dims("cartpole", "balance")[1]
    replay = SequenceReplay(1, 1000, 2, 8)
    context = ContextSpec(wm.stoch, wm.classes, wm.deter)
    collector = build_collector([env_factory(env_cfg, seed=0, extra_transform=primer_factory(wm, adim))],
                                DreamerPolicyFactory(wm, obs, adim, explore=True, device="cpu"),
                                frames_per_batch=16, total_frames=128, chunk_size=8, transport="thread",
                                replay=replay, records=ReplayRecords(obs.keys, context))
    try:
        for _ in collector:
            pass
    finally:
        collector.shutdown()
    stream = replay.stream(0)
    assert len(stream) == 129  # 128 steps + the final observation of the episode ending at step 125
    stored = replay.member(0).storage[:1]
    assert stored["pixels"].dtype == torch.uint8 and ("next", "pixels") not in stored.keys(True)
    assert stored["replay_context", "state"].dtype == torch.uint8
    assert stored["replay_context", "belief"].dtype == torch.float16
    assert stored.bytes() == bytes_per_transition(obs.pixels, None, adim, context_bytes(wm.stoch, wm.deter))
    steps, last = stream["step_count"].reshape(-1), stream["is_last"].reshape(-1)
    assert last.sum() == 1 and last[125] and steps[124] == 124 and steps[125] == 125
    assert stream["next", "done"].reshape(-1)[124] and stream["is_init"].reshape(-1)[126]
    assert not (stream["pixels"][125] == stream["pixels"][124]).all()  # the final frame, not a copy
    assert (stream["replay_context", "belief"][125] == 0).all()
    # the acting latents (record 0: the GRU of zeros, still 0 for untrained weights)
    assert (stream["replay_context", "belief"][1:125].float().abs().sum(-1) > 0).all()


def test_pixels_reach_the_encoder_as_uint8_and_are_scaled_there():
    """The learner batch keeps uint8 (4x less to move to the device); the encoder maps it to [-0.5, 0.5]."""
    from torchrl.modules import DreamerV3ImageEncoder

    encoder = DreamerV3ImageEncoder(3, depth=4, mults=(1, 2), kernel_size=5)
    image = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    assert torch.allclose(encoder(image), encoder(image.float() / 255.0))
    assert not torch.allclose(encoder(image), encoder(image.float()))


def test_a_write_while_another_thread_compiles_keeps_the_shared_length():
    """torch raises torch.compiler.is_compiling() for the whole process while any thread compiles;
    torchrl's storage then stored its length as a plain int, and len() failed afterwards (the
    learner compiling its regions while the collector's writer thread extends the replay)."""
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer

    def write_during_compile(storage):
        buffer = TensorDictReplayBuffer(storage=storage)
        td = TensorDict({"x": torch.zeros(5, 1)}, [5])
        buffer.extend(td)
        with torch.compiler._compile_session_context():  # what Dynamo holds while it compiles
            buffer.extend(td)
        return len(buffer)

    with pytest.raises(AttributeError, match="'int' object has no attribute 'value'"):
        write_during_compile(LazyTensorStorage(100))  # torchrl's storage
    assert write_during_compile(CompileSafeStorage(100)) == 10
    replay = SequenceReplay(2, 100, 2, 4)
    assert all(isinstance(replay.buffer[i].storage, CompileSafeStorage) for i in range(2))
