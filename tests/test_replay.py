"""SequenceReplay without a collector: routing, wrap-around, sampling."""
import torch
from tensordict import TensorDict

from collectors.replay import SequenceReplay
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


def test_bytes_per_transition_matches_what_the_collector_stores_for_pixels():
    """uint8 pixels at t only (no next-pixel copy): the estimate used by the start-up RAM check is
    exactly what a real pixel env's transition takes in replay storage."""
    from omegaconf import OmegaConf

    from collectors.collector import build_collector
    from collectors.envs import action_dim, env_factory
    from collectors.specs import bytes_per_transition
    from dreamer.agent import ObsSpec
    from dreamer.policy import CARRY_KEYS, DreamerPolicyFactory, primer_factory

    env_cfg = OmegaConf.create(dict(domain="cartpole", task="balance", obs="pixels", image_size=64,
                                    action_repeat=2, camera=None, fast_visuals=True))
    from dreamer.config import WorldModelConfig

    wm = OmegaConf.merge(OmegaConf.structured(WorldModelConfig), OmegaConf.load(ROOT / "conf/world_model/tiny.yaml"))
    obs, adim = ObsSpec.from_env("pixels", 64), action_dim("cartpole", "balance")
    replay = SequenceReplay(1, 1000, 2, 8)
    drop = (("next", "pixels"),) + CARRY_KEYS + tuple(("next", k) for k in CARRY_KEYS)
    collector = build_collector([env_factory(env_cfg, seed=0, extra_transform=primer_factory(wm, adim))],
                                DreamerPolicyFactory(wm, obs, adim, explore=True, device="cpu"),
                                frames_per_batch=16, total_frames=16, chunk_size=8, transport="thread",
                                replay=replay, drop_keys=drop)
    try:
        for _ in collector:
            pass
    finally:
        collector.shutdown()
    stored = replay.member(0).storage[:1]
    assert stored["pixels"].dtype == torch.uint8 and ("next", "pixels") not in stored.keys(True)
    assert stored.bytes() == bytes_per_transition(obs.pixels, None, adim) == 12288 + 4 + 52


def test_pixels_reach_the_encoder_as_uint8_and_are_scaled_there():
    """The learner batch keeps uint8 (4x less to move to the device); the encoder maps it to [-0.5, 0.5]."""
    from torchrl.modules import DreamerV3ImageEncoder

    encoder = DreamerV3ImageEncoder(3, depth=4, mults=(1, 2), kernel_size=5)
    image = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8)
    assert torch.allclose(encoder(image), encoder(image.float() / 255.0))
    assert not torch.allclose(encoder(image), encoder(image.float()))
