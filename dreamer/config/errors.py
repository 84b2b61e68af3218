"""The one error a bad config value raises: its message starts with the dotted key."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config value is invalid; the message starts with the dotted key."""

    def __init__(self, key: str, problem: str):
        self.key = key
        super().__init__(f"config key '{key}': {problem}")


def _check(ok: bool, key: str, problem: str) -> None:
    if not ok:
        raise ConfigError(key, problem)
