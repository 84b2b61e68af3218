"""A full disk as one clear error: what was being written, where, instead of a chained traceback.

Writes of the run's files (metrics, episodes, scores, videos, checkpoints) go through `writing(path)`,
which turns "no space left" however it surfaces (an OSError, torch.save's RuntimeError with the
OSError as its context, ffmpeg's broken pipe with the reason in its message) into DiskFullError.
"""
from __future__ import annotations

import contextlib
import errno
from pathlib import Path

NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFullError(OSError):
    def __init__(self, path: str | Path, reason: str = "No space left on device"):
        super().__init__(errno.ENOSPC, reason, str(path))
        self.path = Path(path)

    def __str__(self) -> str:
        return f"disk full ({self.strerror}) writing {self.path}"


def is_no_space(err: BaseException | None) -> bool:
    """True if `err`, or an error it was raised from or during, says the disk is full."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, DiskFullError):
            return True
        if isinstance(err, OSError) and err.errno in NO_SPACE_ERRNOS:
            return True
        if "No space left on device" in str(err) or "Disk quota exceeded" in str(err):
            return True
        err = err.__cause__ or err.__context__
    return False


@contextlib.contextmanager
def writing(path: str | Path):
    """Re-raises a no-space failure inside as DiskFullError(path); other errors pass unchanged."""
    try:
        yield
    except DiskFullError:
        raise
    except Exception as err:
        if is_no_space(err):
            raise DiskFullError(path) from err
        raise
