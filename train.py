"""DreamerV3 on DeepMind Control: `python train.py [group=preset] [key=value ...]`.

Thin entrypoint: Hydra composes conf/config.yaml and the groups; dreamer.app does the rest.
"""
import sys

import hydra
from omegaconf import DictConfig

from dreamer.config import ConfigError, check_override_keys, register_configs, validate_or_exit
from dreamer.stop import StopRequest

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg: DictConfig) -> None:
    config = validate_or_exit(cfg)  # before torch is imported: a bad override fails in about a second
    # Ctrl-C and SIGTERM are recorded from here on and honoured at safe points: a KeyboardInterrupt
    # raised inside a library's import can be swallowed by a broad `except` there (seen once: a
    # Ctrl-C 1 s into a cold start was lost and the run trained on).
    stop = StopRequest().install()
    from dreamer.app import run

    run(config, stop)


if __name__ == "__main__":
    try:
        check_override_keys(sys.argv[1:])  # a mistyped key: name it and list the valid ones
    except ConfigError as err:
        sys.exit(f"error: {err}")
    main()
