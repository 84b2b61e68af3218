"""The collector benchmark runs end to end and prints its table (figures are not asserted)."""
import subprocess
import sys

import pytest

from tests.conftest import ROOT


@pytest.mark.slow
def test_collector_bench_prints_table():
    proc = subprocess.run(
        [sys.executable, "-m", "collectors.bench", "--steps", "128", "--warmup", "64",
         "--frames-per-batch", "32", "--chunks", "1,16"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("| chunk")):]
    assert table == lines[-len(table):], "the table must print last"
    assert table[0].startswith("| chunk | steps/s | driver CPU ms/step")
    rows = {line.split("|")[1].strip(): line for line in table[2:]}
    assert set(rows) == {"1", "16", "env only (no collector)"}
    assert "1.0x" in rows["1"]


@pytest.mark.slow
def test_learner_bench_prints_table():
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.learner", "--size", "tiny", "--batch", "2", "--length", "8",
         "--updates", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-3].startswith("| learner | app ms/update")
    assert lines[-1].startswith("| eager fp32 |")
