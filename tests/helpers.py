"""Shared test helpers: process-tree checks and sequence checks."""
import psutil
import torch


def live_children(proc: psutil.Process | None = None) -> list[psutil.Process]:
    """Descendants still running, ignoring multiprocessing's resource tracker (exits with us)."""
    proc = proc or psutil.Process()
    alive = []
    for child in proc.children(recursive=True):
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
            alive.append(child)
        except psutil.NoSuchProcess:
            continue
    return alive


def processes_tagged(tag: str) -> list[psutil.Process]:
    """Processes whose environment carries DREAMER_TEST_TAG=tag (survivors of a subprocess run)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("DREAMER_TEST_TAG") == tag and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def assert_sequences_consistent(batch) -> None:
    """Each row: one env, and steps either follow on (+1) or start a marked new episode."""
    env_index = batch["env_index"].reshape(batch.shape)
    assert (env_index == env_index[:, :1]).all(), "a sampled sequence mixes environments"
    steps = batch["step_count"].reshape(batch.shape)
    is_init = batch["is_init"].reshape(batch.shape)
    follows = steps[:, 1:] == steps[:, :-1] + 1
    restarts = is_init[:, 1:] & (steps[:, 1:] == 0)
    assert (follows | restarts).all(), f"unmarked break in a sequence:\n{steps}\n{is_init}"
    assert not (is_init & (steps != 0)).any(), "is_init set in the middle of an episode"


def assert_stream_in_order(stream) -> None:
    """One env's stored transitions, oldest first: consecutive steps, resets only at is_init."""
    steps = stream["step_count"].reshape(-1)
    is_init = stream["is_init"].reshape(-1)
    follows = steps[1:] == steps[:-1] + 1
    restarts = is_init[1:] & (steps[1:] == 0)
    assert torch.all(follows | restarts), f"stream out of order: {steps.tolist()}"
