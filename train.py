"""DreamerV3 on DeepMind Control: `python train.py [group=preset] [key=value ...]`.

Thin entrypoint: Hydra composes conf/config.yaml and the groups; dreamer.app does the rest.
"""
import hydra
from omegaconf import DictConfig

from dreamer.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    from dreamer.app import run

    run(cfg)


if __name__ == "__main__":
    main()
