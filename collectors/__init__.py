"""Environments and collection; knows nothing about learning (policies arrive as factories).
Importing it changes nothing in the process: the entry points call dreamer.runtime.setup() first."""
