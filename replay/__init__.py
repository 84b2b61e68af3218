"""Replay: per-env sequence streams in RAM or on disk (buffer.py, disk.py), the record format the
collector writes and the learner reads, with its compressed latent context (records.py), and
batches prefetched for the learner (prefetch.py). Collection writes into it, the learner samples
from it; it imports neither."""
