"""Replay on disk (replay.storage=disk): each env stream in torchrl's LazyMemmapStorage under
replay.dir, and checkpoints that locate the files instead of copying them.

Layout: <replay.dir>/env<i>/ holds one stream's memory-mapped tensors (tensordict's files: one per
key, and its meta.json) and `written`, an 8-byte journal. The records are the memory storage's
(uint8 pixels, the compressed context); sampling, routing, the context write-back and prefetch
are unchanged: only the storage class differs.

Checkpoint (O(1) in the replay's size): the files' dirty pages are fsynced, then the checkpoint
holds per stream its length, cursor and write count, the size of every file, and a checksum of
these numbers and of the tensordict metadata. Resume reopens the files where they are (the run dir
of the checkpoint: the resumed run keeps writing there), after checking them: a missing or
truncated file, or metadata that differs, fails with one line naming the file.

A kill at any moment: the journal holds the write count a stream is about to reach before any
record of an extend is written, so a resume knows how many records were written after the
checkpoint. Those lie in the ring from the checkpoint's cursor on, where the resumed run writes
next; the length and cursor of the checkpoint ignore them. Where they overwrote (wrapping) older
records, the first older record that survives is marked as an episode start (`is_init`): no
sampled sequence then joins the newest post-checkpoint record to it, and the replay a resume
accepts is a consistent one. Context write-backs after the checkpoint stay (refreshed latents).
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from tensordict import TensorDict

from patches.storage import MemmapStorage, restore_ring, writer_position

FORMAT = "dreamer-app/replay-disk/v1"
JOURNAL = "written"


class ReplayFilesError(RuntimeError):
    """The replay files of a checkpoint are missing, truncated or not the checkpoint's."""


def read_journal(path: Path) -> int | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return int.from_bytes(data[:8], "little") if len(data) >= 8 else None


def stream_dir(directory: Path, env: int) -> Path:
    return Path(directory) / f"env{env}"


def _files(member_dir: Path) -> dict[str, int]:
    """{path relative to the stream's dir: bytes} of the storage's files (not the journal)."""
    return {str(p.relative_to(member_dir)): p.stat().st_size for p in sorted(member_dir.rglob("*"))
            if p.is_file() and p.name != JOURNAL}


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _checksum(streams: list[dict], metas: list[str]) -> str:
    text = json.dumps({"streams": streams, "metas": metas}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _metas(member_dir: Path) -> str:
    """The tensordict metadata files of a stream (keys, shapes, dtypes), concatenated."""
    return "".join(p.read_text() for p in sorted(member_dir.rglob("meta.json")))


def checkpoint_state(replay, directory: Path, run_dir: Path) -> dict:
    """What locates and validates the files (their data stays where it is); the files are fsynced."""
    directory, run_dir = Path(directory).resolve(), Path(run_dir).resolve()
    streams, metas = [], []
    for env in range(replay.num_envs):
        member, member_dir = replay.member(env), stream_dir(directory, env)
        files = _files(member_dir) if member_dir.exists() else {}
        for name in files:
            _fsync(member_dir / name)
        cursor, written = writer_position(member)
        streams.append({"length": len(member), "cursor": cursor, "written": written, "files": files})
        metas.append(_metas(member_dir) if member_dir.exists() else "")
    where = os.path.relpath(directory, run_dir) if directory.is_relative_to(run_dir) else str(directory)
    return {"format": FORMAT, "dir": where, "streams": streams, "checksum": _checksum(streams, metas)}


def resolve_dir(state: dict, run_dir: Path) -> Path:
    """The checkpoint's replay dir: relative to the run dir that wrote the checkpoint."""
    where = Path(state["dir"])
    return where if where.is_absolute() else Path(run_dir) / where


def check_files(state: dict, directory: Path) -> None:
    """One line naming the first file that is missing, truncated or not the checkpoint's."""
    if state.get("format") != FORMAT:
        raise ReplayFilesError(f"the checkpoint's replay is in format {state.get('format')!r}, not {FORMAT!r}")
    metas = []
    for env, stream in enumerate(state["streams"]):
        member_dir = stream_dir(directory, env)
        for name, size in stream["files"].items():
            path = member_dir / name
            if not path.exists():
                raise ReplayFilesError(f"replay file {path} is missing (the checkpoint's replay is in {directory})")
            if path.stat().st_size != size:
                raise ReplayFilesError(f"replay file {path} has {path.stat().st_size:,} bytes, the checkpoint "
                                       f"recorded {size:,} (truncated or replaced)")
        metas.append(_metas(member_dir) if stream["files"] else "")
    if _checksum(state["streams"], metas) != state["checksum"]:
        raise ReplayFilesError(f"the replay files in {directory} do not match the checkpoint (their metadata "
                               "differs): another run's replay?")


def reopen(replay, state: dict, directory: Path) -> list[int]:
    """Maps the checkpoint's files into `replay`'s (empty, disk) streams at the checkpoint's length
    and cursor; returns, per stream, how many records were written after the checkpoint."""
    check_files(state, directory)
    late = []
    for env, stream in enumerate(state["streams"]):
        member, member_dir = replay.member(env), stream_dir(directory, env)
        journal = read_journal(member_dir / JOURNAL)
        written_after = max(0, (journal or stream["written"]) - stream["written"])
        late.append(written_after)
        if not stream["files"]:  # this env had written nothing
            continue
        data = TensorDict.load_memmap(member_dir)
        restore_ring(member, data, stream["length"], stream["cursor"], stream["written"])
        if written_after:
            _cut_after_late_writes(data, stream, written_after, data.shape[0])
        member.writer.mark(stream["written"])  # what the files hold from here on is the checkpoint's
    return late


def _cut_after_late_writes(data: TensorDict, stream: dict, written_after: int, capacity: int) -> None:
    """Records written after the checkpoint occupy the ring from its cursor on; if they overwrote
    older ones, the first surviving older record starts an episode (no sequence joins across)."""
    end = stream["cursor"] + written_after
    # a ring not yet full holds its records at [0, length): late writes reach them only by wrapping
    overwrote = end > capacity if stream["length"] < capacity else True
    survivor = end % capacity
    if overwrote and written_after < stream["length"] and survivor < stream["length"]:
        data["is_init"][survivor] = True


def make_storage(capacity: int, member_dir: Path) -> MemmapStorage:
    return MemmapStorage(capacity, scratch_dir=member_dir, existsok=False, auto_cleanup=False)
