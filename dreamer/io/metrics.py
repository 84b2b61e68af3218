"""Run metrics: a local JSONL file (readable without wandb), and the backends of logger.backends:

  wandb        offline by default: no account or network; the run lands in `<run dir>/wandb/` and
               `wandb sync <run dir>/wandb/offline-run-*` uploads it later
  tensorboard  event files in `<run dir>/tensorboard/` (dreamer/io/tensorboard.py): the same scalars,
               the videos and the composed config; `tensorboard --logdir outputs` shows every run
"""
from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

from dreamer.io.disk import writing


class MetricsLogger:
    def __init__(self, run_dir: str | Path, backends: tuple[str, ...] | list[str] = ("wandb",), mode: str = "offline",
                 project: str = "dreamer-app", group: str | None = None, config: dict | None = None,
                 run_id: str | None = None, name: str | None = None):
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / "metrics.jsonl"
        self._file = open(self.path, "a", buffering=1)  # line-buffered: readable while running
        self._episodes = open(self.run_dir / "episodes.jsonl", "a", buffering=1)  # one line per episode
        self.wandb_run = self.tensorboard = None
        if "wandb" in backends and mode != "disabled":
            self.wandb_run = _init_wandb(self.run_dir, mode, project, group, config, run_id, name)
        if "tensorboard" in backends:
            from dreamer.io.tensorboard import TensorBoardWriter

            self.tensorboard = TensorBoardWriter(self.run_dir / "tensorboard", config)

    @property
    def run_id(self) -> str | None:
        return self.wandb_run.id if self.wandb_run is not None else None

    def log(self, step: int, metrics: dict) -> None:
        clean = {k: _plain(v) for k, v in metrics.items()}
        with writing(self.path):
            self._file.write(json.dumps({"step": step, **clean}) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log(clean, step=step)
        if self.tensorboard is not None:
            self.tensorboard.scalars(step, clean)

    def log_episodes(self, step: int, episodes: list[tuple[float, int]], stats: list[dict] | None = None) -> None:
        """Finished training episodes (return, length), each at the env step it was seen, with the
        env's end-of-episode stats (Crafter's achievements) where it has any."""
        stats = stats or [{}] * len(episodes)
        with writing(self._episodes.name):
            for (ret, length), extra in zip(episodes, stats):
                self._episodes.write(json.dumps({"step": step, "return": ret, "length": length, **extra}) + "\n")

    def log_videos(self, step: int, videos: dict) -> None:
        """{name: mp4 path}: the paths go to the JSONL file, the videos to wandb."""
        if not videos:
            return
        with writing(self.path):
            self._file.write(json.dumps({"step": step, **{k: str(v) for k, v in videos.items()}}) + "\n")
        if self.wandb_run is not None:
            import wandb

            self.wandb_run.log({k: wandb.Video(str(v), format="mp4") for k, v in videos.items()}, step=step)
        if self.tensorboard is not None:
            self.tensorboard.videos(step, videos)

    def close(self) -> None:
        """Closes the files and wandb (idempotent). A file that cannot be flushed (a full disk)
        does not keep the others or wandb open: the first such error is raised after all closed."""
        failed = None
        if self.tensorboard is not None:
            writer, self.tensorboard = self.tensorboard, None
            try:
                writer.close()
            except OSError as err:
                failed = err
        for f in (self._file, self._episodes):
            try:
                with writing(f.name):
                    f.close()
            except OSError as err:
                failed = failed or err
                with contextlib.suppress(OSError):  # the unwritten lines are gone either way
                    f.close()
        if self.wandb_run is not None:
            import wandb

            run, self.wandb_run = self.wandb_run, None
            try:
                run.finish()
            finally:
                wandb.teardown()  # stops the wandb-core service process now, not at interpreter exit
        if failed is not None:
            raise failed


def _plain(value):
    value = float(value) if hasattr(value, "item") or isinstance(value, (int, float)) else value
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _init_wandb(run_dir: Path, mode: str, project: str, group, config, run_id, name):
    os.environ.setdefault("WANDB_SILENT", "true")
    import wandb

    return wandb.init(project=project, dir=str(run_dir), mode=mode, group=group, config=config,
                      id=run_id, resume="allow" if run_id else None, name=name)


def sweep_group_name(sweep_dir: str | Path) -> str:
    """The wandb group of a sweep's jobs: its dir's last two parts (e.g. 2026-12-03_05-10-00)."""
    return "_".join(Path(sweep_dir).parts[-2:])


def read_metrics(path: str | Path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
