"""Evaluation episodes and videos on a pixel task (tiny model, short episodes)."""
import torch
from omegaconf import OmegaConf
from tensordict import TensorDict

from dreamer.agent.model import build_agent
from dreamer.agent.obs import ObsSpec
from dreamer.config import LearnerConfig
from dreamer.run.evaluator import Evaluator, open_loop_frames
from tests.helpers import TINY

ENV = OmegaConf.create(dict(domain="cartpole", task="balance", obs="pixels", image_size=64,
                            action_repeat=8, camera=None, fast_visuals=True))


def test_eval_episode_writes_episode_and_open_loop_videos(tmp_path):
    agent = build_agent(TINY, LearnerConfig(), ObsSpec(), action_dim=1)
    evaluator = Evaluator(agent, ENV, TINY, seed=0, video=True)
    try:
        result = evaluator.run(episodes=2, video_dir=tmp_path, tag="000000100")
    finally:
        evaluator.close()
    assert result.lengths == [125, 125]  # 1000 physics steps / action repeat 8
    assert all(0 <= r <= 125 * 8 for r in result.returns)
    assert set(result.videos) == {"eval/video", "eval/open_loop"}
    for path in result.videos.values():
        assert path.read_bytes()[4:8] == b"ftyp" and path.stat().st_size > 1000


def test_open_loop_frames_show_real_predicted_and_error_side_by_side():
    agent = build_agent(TINY, LearnerConfig(), ObsSpec(), action_dim=1)
    steps = 12
    td = TensorDict({"action": torch.rand(steps, 1) * 2 - 1,
                     "next": {"pixels": torch.randint(0, 256, (steps, 3, 64, 64), dtype=torch.uint8)}}, [steps])
    frames = open_loop_frames(agent, td, context=5, steps=50)
    assert frames.shape == (steps, 3, 64, 192) and frames.dtype == torch.uint8
    assert torch.equal(frames[..., :64], td["next", "pixels"])  # left third: the real frames


def test_a_gpu_checkpoint_config_evaluates_on_this_machine(tmp_path):
    """A checkpoint of the 64-env CUDA preset (static inference batch, CUDA graph) must load here."""
    from omegaconf import OmegaConf

    from dreamer.evaluate import cli_config
    from dreamer.io import checkpoint
    from tests.helpers import composed

    saved = OmegaConf.to_container(composed("experiment=seed_pixel_64env", "learner.cudagraph=true"))
    path = checkpoint.save(tmp_path / "checkpoints", 1000, {"config": saved, "frames": 1000, "updates": 10,
                                                                      "loss": {}})
    state, config, out = cli_config([f"checkpoint={path}", "eval.episodes=2"])
    assert config.collector.inference_static_batch_size is None and config.learner.cudagraph == "auto"
    assert config.eval.episodes == 2 and config.env.task == saved["env"]["task"]
    assert out == tmp_path / "eval" and state["updates"] == 10
    assert config.learner.device == "auto" and config.collector.device == "auto"


def test_a_checkpoint_config_from_before_logger_backends_still_loads():
    from dreamer.evaluate import migrate_config

    old = {"logger": {"backend": "none", "mode": "disabled", "project": "p", "group": None, "every": 10}}
    assert migrate_config(old)["logger"] == {"backends": [], "mode": "disabled", "project": "p", "group": None,
                                             "every": 10}
    assert migrate_config({"logger": {"backend": "wandb"}})["logger"] == {"backends": ["wandb"]}
    current = {"logger": {"backends": ["tensorboard"]}}
    assert migrate_config(current) == current


def test_one_seed_gives_one_result_and_leaves_the_callers_generator_alone():
    """The posterior's samples and the sampled actions draw from a generator seeded from the
    evaluation's seed: two evaluations of one policy agree; training's generator is untouched."""
    agent = build_agent(TINY, LearnerConfig(), ObsSpec(), action_dim=1)
    returns = []
    for _ in range(2):
        torch.rand(7)  # the caller's generator moves between evaluations
        before = torch.get_rng_state()
        evaluator = Evaluator(agent, ENV, TINY, seed=3, video=False, sample_actions=True)
        try:
            returns.append(evaluator.run(episodes=1).returns)
        finally:
            evaluator.close()
        assert torch.equal(torch.get_rng_state(), before)
    assert returns[0] == returns[1]
