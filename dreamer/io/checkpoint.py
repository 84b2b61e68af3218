"""Checkpoints a user can trust: atomic writes, safe loads, a fallback past a corrupt newest file.

* Atomic: write a temporary file, fsync, rename (the commit point); keep the newest K. A kill or a
  full disk during a save leaves the previous checkpoints intact and no temporary file.
* Safe: loaded with `torch.load(weights_only=True)`, torch's restricted unpickler, which builds
  only tensors, plain containers, numbers and strings and refuses any other global, so a file
  someone hands us cannot run code. Everything the app saves is therefore plain: RNG states and
  replay streams are converted by the caller (see dreamer/run/loop.py), the config is a plain dict.
  Checkpoints of the earlier format (v1, full pickles) are refused with a message saying so.
* Resuming from a directory takes the newest checkpoint that loads, warning about each one skipped.
"""
from __future__ import annotations

import os
import pickle
import re
import sys
import zipfile
from pathlib import Path
from typing import Callable

import torch

from dreamer.io.disk import writing

FORMAT = "dreamer-app/checkpoint/v2"
UNSAFE_FORMATS = ("dreamer-app/checkpoint/v1",)  # full pickles: never unpickled
NAME = re.compile(r"^step_(\d{12})\.pt$")


class CheckpointError(RuntimeError):
    pass


def save(directory: str | Path, step: int, state: dict, keep: int = 2) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step_{step:012d}.pt"
    tmp = directory / f".{final.name}.tmp-{os.getpid()}"
    try:
        with writing(final), open(tmp, "wb") as f:
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


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def load(path: str | Path, required: tuple[str, ...] = (), on_skip: Callable[[str], None] = _warn) -> dict:
    """The saved state dict of a checkpoint file, or of the newest loadable one in a directory.
    A file is loaded as given (or fails); from a directory the newest checkpoint that loads wins,
    and `on_skip` hears about each newer one that did not. `required`: keys the state must have."""
    path = Path(path)
    if not path.is_dir():
        return load_file(path, required)
    candidates = list_checkpoints(path)[::-1]
    if not candidates:
        raise CheckpointError(f"no checkpoint (step_*.pt) in {path}")
    failures = []
    for candidate in candidates:
        try:
            state = load_file(candidate, required)
        except CheckpointError as err:
            failures.append(str(err))
            continue
        for failure in failures:
            on_skip(f"skipped {failure}; using the older {candidate.name}")
        return state
    raise CheckpointError(f"no checkpoint in {path} loads:\n  " + "\n  ".join(failures))


def load_file(path: Path, required: tuple[str, ...] = ()) -> dict:
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:  # the restricted unpickler refused something: nothing ran
        if _marker_in(path, UNSAFE_FORMATS):
            raise CheckpointError(f"{path} predates the safe checkpoint format ({FORMAT}): it was written by an "
                                  "older dreamer-app as a full pickle, which can run code when loaded, so it is "
                                  "not loaded; retrain, or resume from a checkpoint written by this version") from None
        raise CheckpointError(f"{path} is not a safe dreamer-app checkpoint: it holds objects that could run "
                              f"code when loaded ({_refusal(err)}); nothing in it was run") from None
    except Exception as err:  # truncated zip, garbage bytes, ...
        raise CheckpointError(f"{path} is not a readable checkpoint (truncated or corrupt?): "
                              f"{_first_line(err)}") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT or not isinstance(payload.get("state"), dict):
        raise CheckpointError(f"{path} is not a dreamer-app checkpoint (format {FORMAT!r} expected)")
    missing = [key for key in required if key not in payload["state"]]
    if missing:
        raise CheckpointError(f"{path} is not a dreamer-app training checkpoint (no {', '.join(missing)})")
    return payload["state"]


def _marker_in(path: Path, markers: tuple[str, ...]) -> bool:
    """Whether the pickle inside a torch zip file contains one of `markers`, read as bytes (never unpickled)."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickled = next((n for n in archive.namelist() if n.endswith("/data.pkl")), None)
            data = archive.read(pickled) if pickled else b""
    except (OSError, zipfile.BadZipFile):
        return False
    return any(marker.encode() in data for marker in markers)


def _refusal(err: Exception) -> str:
    """The unpickler's reason (e.g. 'unsupported GLOBAL posix.system'), without torch's advice to
    retry with the unrestricted unpickler."""
    for line in str(err).splitlines():
        if "GLOBAL" in line or "Unsupported" in line:
            return line.strip().rstrip(".")
    return "objects beyond tensors, containers, numbers and strings"


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
