"""Builds the application's parts from the config and runs the training loop."""
from __future__ import annotations

import sys

from omegaconf import DictConfig

from dreamer.config import ConfigError, validate


def run(cfg: DictConfig) -> None:
    try:
        config = validate(cfg)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    raise NotImplementedError("training loop: issue #4")
