"""`python -m tests.full_disk_run WHERE [train.py overrides]`: train.py with the disk "filling" after
the first checkpoint, for machines where the tests cannot mount a small tmpfs.

WHERE = metrics: metrics.jsonl's writes fail with ENOSPC (its buffered lines cannot be flushed on
close either), as a Python file on a full disk does. WHERE = checkpoint: every later torch.save
writes a few bytes, then fails as torch reports ENOSPC (a RuntimeError raised while handling it).
"""
import errno
import os
import runpy
import sys
from pathlib import Path

import torch

from dreamer.io import checkpoint, metrics

ROOT = Path(__file__).resolve().parents[1]
NO_SPACE = os.strerror(errno.ENOSPC)


class FullFile:
    """A text file on a full disk: nothing more can be written or flushed."""

    def __init__(self, inner):
        self.inner, self.name = inner, inner.name

    def write(self, text):
        raise OSError(errno.ENOSPC, NO_SPACE)

    def close(self):
        if not self.inner.closed:
            self.inner.close()
            raise OSError(errno.ENOSPC, NO_SPACE)


def fill_after_first_checkpoint(where: str) -> None:
    saves = []
    real_save, real_log = torch.save, metrics.MetricsLogger.log

    def save(obj, f, *args, **kwargs):
        if saves and where == "checkpoint":
            f.write(b"PK partial")
            try:
                raise OSError(errno.ENOSPC, NO_SPACE)
            except OSError:
                raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598")
        saves.append(f)
        return real_save(obj, f, *args, **kwargs)

    def log(self, step, values):
        if saves and where == "metrics" and not isinstance(self._file, FullFile):
            self._file = FullFile(self._file)
        return real_log(self, step, values)

    checkpoint.torch.save = save
    metrics.MetricsLogger.log = log


if __name__ == "__main__":
    fill_after_first_checkpoint(sys.argv.pop(1))
    sys.argv[0] = str(ROOT / "train.py")
    runpy.run_path(str(ROOT / "train.py"), run_name="__main__")
