"""TensorBoard backend of the metrics logger (logger.backends contains tensorboard).

The run's event files go to `<run dir>/tensorboard/`: every numeric value of metrics.jsonl as a
scalar at its env step, the eval and open-loop videos as animated images, and the composed config
as text. Videos: TensorBoard shows an animated GIF in its Images tab; torch's `add_video` would need
moviepy to encode one, so the GIF is encoded here (imageio, already a dependency) and written as
an image summary, which is what `add_video` writes too.
"""
from __future__ import annotations

import io
import math
from pathlib import Path

MAX_VIDEO_FRAMES = 250  # longer episodes keep every k-th frame: a GIF of 1,000 64x64 frames is ~10 MB


class TensorBoardWriter:
    def __init__(self, log_dir: str | Path, config: dict | None = None):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir))
        if config:
            import yaml

            text = yaml.safe_dump(config, sort_keys=False)
            # Markdown: indented lines are a code block (the yaml's own indentation survives)
            self.writer.add_text("config", "\n".join("    " + line for line in text.splitlines()), 0)

    def scalars(self, step: int, values: dict) -> None:
        for key, value in values.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(key, value, step)

    def videos(self, step: int, videos: dict) -> None:
        """{tag: mp4 path} -> one animated image per tag."""
        for tag, path in videos.items():
            self.writer.file_writer.add_summary(gif_summary(tag, Path(path)), step)

    def close(self) -> None:
        self.writer.close()


def gif_summary(tag: str, mp4: Path, fps: int = 20):
    """An image summary holding the mp4's frames as an animated GIF."""
    import imageio.v2 as imageio
    from tensorboard.compat.proto.summary_pb2 import Summary

    frames = imageio.mimread(mp4, memtest=False)
    every = max(1, math.ceil(len(frames) / MAX_VIDEO_FRAMES))
    frames = frames[::every]
    buffer = io.BytesIO()
    imageio.mimwrite(buffer, frames, format="GIF", duration=1000 * every / fps, loop=0)  # real time
    height, width = frames[0].shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=buffer.getvalue())
    return Summary(value=[Summary.Value(tag=tag, image=image)])
