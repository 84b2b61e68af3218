"""Atomic checkpoints: write to a temporary file, fsync, rename; keep the newest K.

A kill during a save leaves the previous checkpoint intact (the rename is the commit point).
A truncated or foreign file is rejected with CheckpointError, never half-loaded.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

import torch

FORMAT = "dreamer-app/checkpoint/v1"
NAME = re.compile(r"^step_(\d{12})\.pt$")


class CheckpointError(RuntimeError):
    pass


def save(directory: str | Path, step: int, state: dict, keep: int = 2) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step_{step:012d}.pt"
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            torch.save({"format": FORMAT, "step": step, "state": state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(directory)
    for old in list_checkpoints(directory)[:-keep]:
        old.unlink(missing_ok=True)
    return final


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete checkpoints in `directory`, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if NAME.match(p.name))


def latest(directory: str | Path) -> Path | None:
    found = list_checkpoints(directory)
    return found[-1] if found else None


def load(path: str | Path) -> dict:
    """The saved state dict; `path` may be a checkpoint file or a directory of them (newest wins)."""
    path = Path(path)
    if path.is_dir():
        newest = latest(path)
        if newest is None:
            raise CheckpointError(f"no checkpoint (step_*.pt) in {path}")
        path = newest
    try:
        payload = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as err:  # truncated zip, pickling garbage, ...
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupt?): {err}") from err
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a dreamer-app checkpoint (format {FORMAT!r} expected)")
    return payload["state"]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
