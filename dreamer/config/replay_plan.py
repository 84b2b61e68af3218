"""Where the replay lives and whether it fits, decided once at start-up (before torch is imported).

replay.storage: `memory` keeps the streams in host RAM; `disk` in memory-mapped files under
replay.dir (replay/disk.py), where the page cache is the only RAM it needs; `auto` takes
memory when the whole replay fits comfortably (half the RAM left beside the run's processes) and
disk otherwise. The check then compares the replay's bytes with free RAM, or with the free space
of replay.dir's filesystem.
"""
from __future__ import annotations

from pathlib import Path

from dreamer.config.errors import _check

PROCESS_RSS_BYTES = 512 * 2**20  # measured: an env worker or the inference server holds ~0.4-0.5 GB
AUTO_MEMORY_SHARE = 0.5  # auto keeps the replay in RAM up to this share of the RAM left


def replay_plan(config) -> tuple[int, int]:
    """(bytes per stored transition, bytes of the full replay) for this config."""
    from collectors.specs import context_bytes, env_spec, spec_bytes

    wm = config.world_model
    context = context_bytes(wm.stoch, wm.deter) if config.replay.context else 0
    per = spec_bytes(env_spec(config.env), context)
    return per, per * config.replay.capacity


def available_ram(config) -> int:
    import psutil

    processes = config.collector.num_envs + 2  # env workers, inference server, driver
    return psutil.virtual_memory().available - processes * PROCESS_RSS_BYTES


def replay_storage(config) -> str:
    """`memory` or `disk`: replay.storage, with auto resolved for this machine."""
    if config.replay.storage != "auto":
        return config.replay.storage
    _, total = replay_plan(config)
    return "memory" if total <= AUTO_MEMORY_SHARE * available_ram(config) else "disk"


def replay_dir(config, run_dir: str | Path) -> Path:
    """replay.dir, or <run dir>/replay."""
    return Path(config.replay.dir) if config.replay.dir else Path(run_dir) / "replay"


def check_replay_fits(config, run_dir: str | Path | None = None) -> None:
    """Before any worker starts: the full replay fits in the RAM left beside the processes (memory),
    or on replay.dir's filesystem (disk)."""
    per, total = replay_plan(config)
    what = f"{config.replay.capacity:,} transitions x {per:,} bytes = {total / 1e9:.1f} GB"
    if replay_storage(config) == "memory":
        available = available_ram(config)
        processes = config.collector.num_envs + 2
        _check(total <= available, "replay.capacity",
               f"{what}, but only {max(available, 0) / 1e9:.1f} GB of host RAM is free beside {processes} "
               f"processes of ~0.5 GB; at most {max(available, 0) // per:,} transitions fit, or "
               "replay.storage=disk keeps the replay on disk")
        return
    directory = replay_dir(config, run_dir or Path.cwd())
    if config.checkpoint.resume is None:  # a resume may reopen its files there (dreamer/run/app.py)
        _check(not (directory.is_dir() and any(directory.iterdir())), "replay.dir",
               f"{directory} holds files already (another run's replay?); give an empty or new dir")
    free = free_space(directory)
    _check(total <= free, "replay.capacity" if config.replay.dir is None else "replay.dir",
           f"{what} on disk (replay.storage=disk, in {directory}), but only {free / 1e9:.1f} GB is free on its "
           f"filesystem; at most {free // per:,} transitions fit")


def free_space(directory: Path) -> int:
    """Free bytes on the filesystem of `directory`, or of its nearest existing parent."""
    import shutil

    probe = Path(directory).resolve()
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free
