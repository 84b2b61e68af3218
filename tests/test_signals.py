"""Ctrl-C and SIGTERM stop train.py and every worker it started, within 10 s."""
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from tests.conftest import ROOT
from tests.helpers import processes_tagged


def start_long_run(tag: str) -> subprocess.Popen:
    env = dict(os.environ, DREAMER_TEST_TAG=tag, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "train.py", "env=dmc_cartpole_balance", "collector.num_envs=2",
         "collector.total_frames=10000000", "logger=none", f"hydra.run.dir=/tmp/dreamer-test-{tag}"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for_collection(proc: subprocess.Popen, tag: str, timeout: float = 120) -> None:
    """Until the workers and the server are up (4 tagged processes or more)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()
        if len(processes_tagged(tag)) >= 4:
            time.sleep(3)  # let the first batches flow
            return
        time.sleep(0.5)
    pytest.fail("collection did not start")


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_the_whole_process_tree(sig):
    tag = uuid.uuid4().hex
    proc = start_long_run(tag)
    try:
        wait_for_collection(proc, tag)
        proc.send_signal(sig)
        start = time.monotonic()
        proc.wait(timeout=10)
        while processes_tagged(tag) and time.monotonic() - start < 10:
            time.sleep(0.2)
        assert processes_tagged(tag) == [], f"processes left {time.monotonic() - start:.1f}s after {sig.name}"
        assert proc.returncode == 130
    finally:
        for leftover in processes_tagged(tag):
            leftover.kill()
        if proc.poll() is None:
            proc.kill()
