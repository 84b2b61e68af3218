"""Replay in RAM vs on disk (replay.storage): sampling, checkpoints, memory, in one run.

    python -m benchmarks.replay [--records 10000,100000,1000000] [--memory-max 100000] [--samples 20]
                                [--dir DIR] [--drop-cache]

Fills the app's replay (replay/buffer.py, 2 env streams of 64x64 RGB records with a 6-dim action
and the replay context of model s, as the collector stores them) with `--records` records, once in
RAM and once on disk (replay/disk.py), and measures per size:
  sample   ms per batch of B16 x T64 and B32 x T256 sequences (the learner's shapes), the page cache
           warm; with --drop-cache (root) also after dropping it
  save     seconds and bytes of a checkpoint that holds the replay (memory: the streams, written as
           the trainer does; disk: what locates the files)
  RSS      of this process after filling: anonymous (its own memory) + file-backed (the disk replay's
           mapped pages while they sit in the page cache: the kernel drops and rereads them)
Sizes above --memory-max are measured on disk only (a 1M-record pixel replay is 12.5 GB of RAM, and
a memory checkpoint clones it).
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil
import torch
from tensordict import TensorDict

SHAPES = ((16, 64), (32, 256))


def records(n: int, env: int, start: int) -> TensorDict:
    g = torch.Generator().manual_seed(env)
    is_init = torch.zeros(n, 1, dtype=torch.bool)
    return TensorDict({
        "env_index": torch.full((n,), env), "pixels": torch.randint(0, 256, (n, 3, 64, 64), dtype=torch.uint8,
                                                                       generator=g),
        "action": torch.rand(n, 6, generator=g), "is_init": is_init, "is_last": is_init.clone(),
        "step_count": torch.arange(start, start + n).unsqueeze(-1), "policy_version": torch.zeros(n, 1),
        "replay_context": {"state": torch.randint(0, 32, (n, 32), dtype=torch.uint8, generator=g),
                           "belief": torch.rand(n, 512, generator=g).half()},
        "next": {"reward": torch.rand(n, 1, generator=g), "done": is_init.clone(), "terminated": is_init.clone(),
                 "truncated": is_init.clone()},
    }, [n])


def fill(replay, total: int, chunk: int = 2000) -> float:
    start = time.perf_counter()
    block = {env: records(chunk, env, 0) for env in range(replay.num_envs)}
    for first in range(0, total // replay.num_envs, chunk):
        for env in range(replay.num_envs):
            n = min(chunk, total // replay.num_envs - first)
            data = block[env][:n].clone()
            data["step_count"] = torch.arange(first, first + n).unsqueeze(-1)
            replay.extend(data)
    return time.perf_counter() - start


def sample_ms(replay_factory, samples: int) -> dict:
    out = {}
    for batch, length in SHAPES:
        replay = replay_factory(batch, length + 1)
        replay.sample()  # warm: the sampler's trajectory index
        start = time.perf_counter()
        for _ in range(samples):
            replay.sample()
        out[f"{batch}x{length}"] = 1000 * (time.perf_counter() - start) / samples
    return out


def save_checkpoint(replay, run_dir: Path) -> tuple[float, int]:
    from dreamer.io import checkpoint
    from dreamer.run.state import plain_stream
    from replay import disk as replay_disk

    start = time.perf_counter()
    if replay.directory is None:
        state = {"replay": [plain_stream(replay.stream(e)) for e in range(replay.num_envs)]}
    else:
        state = {"replay_disk": replay_disk.checkpoint_state(replay, replay.directory, run_dir)}
    path = checkpoint.save(run_dir / "checkpoints", 0, {**state, "frames": 0}, keep=1)
    return time.perf_counter() - start, path.stat().st_size


def drop_cache() -> bool:
    try:
        os.sync()
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def rss_parts() -> tuple[int, int]:
    """This process's resident bytes: anonymous (its own memory) and file-backed (mapped files'
    pages in the page cache, which the kernel can drop and read back), from /proc/self/status."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    kib = {k: int(fields[k].split()[0]) * 1024 for k in ("RssAnon", "RssFile", "RssShmem") if k in fields}
    if not kib:  # not Linux: all of it as anonymous
        return psutil.Process().memory_info().rss, 0
    return kib.get("RssAnon", 0), kib.get("RssFile", 0) + kib.get("RssShmem", 0)


def measure(n: int, storage: str, base: Path, samples: int, dropping: bool) -> dict:
    from patches.storage import resample_shape
    from replay.buffer import SequenceReplay

    run_dir = base / f"{storage}-{n}"
    run_dir.mkdir(parents=True)
    directory = run_dir / "replay" if storage == "disk" else None
    rss0 = rss_parts()
    replay = SequenceReplay(2, n, 16, 65, directory=directory)
    fill_s = fill(replay, n)
    anon, file = (after - before for after, before in zip(rss_parts(), rss0))

    def same(batch, length):  # the filled streams, sampled at another shape (no copy)
        replay.batch_size, replay.batch_length = batch, length
        resample_shape(replay.buffer, batch, length)
        return replay

    row = {"records": n, "storage": storage, "fill_s": fill_s, "rss_mb": (anon + file) / 2**20,
           "rss_anon_mb": anon / 2**20, "rss_file_mb": file / 2**20,
           "sample_ms": sample_ms(same, samples)}
    if dropping and storage == "disk" and drop_cache():
        row["sample_cold_ms"] = sample_ms(same, max(3, samples // 4))
    row["save_s"], row["save_bytes"] = save_checkpoint(replay, run_dir)
    del replay
    shutil.rmtree(run_dir, ignore_errors=True)
    return row


def table(rows: list[dict]) -> str:
    shapes = [f"{b}x{t}" for b, t in SHAPES]
    head = ("| records | storage | " + " | ".join(f"sample {s} ms" for s in shapes)
            + " | checkpoint s | checkpoint bytes | RSS after filling: anonymous + file-backed (MB) | fill s |")
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for r in rows:
        cold = r.get("sample_cold_ms", {})
        cells = [f"{r['sample_ms'][s]:.1f}" + (f" (cold {cold[s]:.1f})" if s in cold else "") for s in shapes]
        lines.append(f"| {r['records']:,} | {r['storage']} | " + " | ".join(cells)
                     + f" | {r['save_s']:.2f} | {r['save_bytes']:,} | {r['rss_anon_mb']:,.0f} + {r['rss_file_mb']:,.0f} "
                     f"| {r['fill_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="10000,100000,1000000")
    parser.add_argument("--memory-max", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=None, help="where the disk replays go (default: a temp dir)")
    parser.add_argument("--drop-cache", action="store_true", help="also sample after dropping the page cache (root)")
    args = parser.parse_args(argv)
    base = Path(tempfile.mkdtemp(prefix="dreamer-replay-bench-", dir=args.dir))
    rows = []
    try:
        for n in (int(x) for x in args.records.split(",")):
            for storage in ("memory", "disk"):
                if storage == "memory" and n > args.memory_max:
                    continue
                rows.append(measure(n, storage, base, args.samples, args.drop_cache))
                print(f"  {n:,} records, {storage}: done", flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(table(rows))


if __name__ == "__main__":
    main()
