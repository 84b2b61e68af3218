"""What a run writes and reads back: checkpoints, metrics, score files, curves (imports no other part
of dreamer)."""
