"""patches/mkl_amd.py: MKL's AVX-512 kernels on AMD CPUs, loaded before torch; same results."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from patches import mkl_amd

ROOT = Path(__file__).resolve().parents[1]
ON_AMD_AVX512 = mkl_amd.amd_with_avx512(Path("/proc/cpuinfo").read_text()) if Path("/proc/cpuinfo").exists() else False
needs_amd = pytest.mark.skipif(not ON_AMD_AVX512, reason="the fix acts on AMD CPUs with AVX-512 only")

CPU = "processor\t: {i}\nvendor_id\t: {vendor}\nflags\t\t: fpu sse2 avx2 fma {extra}\n\n"


def cpuinfo(vendor: str, *extras: str) -> str:
    return "".join(CPU.format(i=i, vendor=vendor, extra=extra) for i, extra in enumerate(extras))


def test_it_acts_only_on_amd_cpus_with_avx512_on_every_core():
    assert mkl_amd.amd_with_avx512(cpuinfo("AuthenticAMD", "avx512f avx512bw", "avx512f"))
    assert not mkl_amd.amd_with_avx512(cpuinfo("AuthenticAMD", "avx512f", ""))  # one core without
    assert not mkl_amd.amd_with_avx512(cpuinfo("AuthenticAMD", ""))  # Zen 3: MKL's AVX2 is its best
    assert not mkl_amd.amd_with_avx512(cpuinfo("GenuineIntel", "avx512f"))  # MKL chooses well on Intel
    assert not mkl_amd.amd_with_avx512("")


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


RESOLVED = """
import ctypes, os; from dreamer.runtime import setup; setup(); import torch
from patches import mkl_amd
# what the dynamic linker gives torch's MKL: the global scope's definition first, else torch's own
try:
    found = ctypes.CDLL(None).mkl_serv_intel_cpu_true
except AttributeError:
    found = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so")).mkl_serv_intel_cpu_true
print(mkl_amd.STATUS, "|", found())
"""


@needs_amd
def test_torchs_mkl_finds_the_shim_unless_told_not_to(tmp_path):
    on = python(RESOLVED, HOME=str(tmp_path))  # a fresh machine: the shim is built by the first setup()
    assert on.returncode == 0, on.stderr[-2000:]
    assert on.stdout.strip() == f"{mkl_amd.ACTIVE} | 1"
    assert (tmp_path / ".cache" / "dreamer-app" / mkl_amd.LIBRARY).is_file()
    off = python(RESOLVED, **{mkl_amd.ENV_VAR: "0"})
    assert off.stdout.strip() == f"MKL: its default (AVX2) kernels on this AMD CPU ({mkl_amd.ENV_VAR}=0) | 0"
    typo = python(RESOLVED, **{mkl_amd.ENV_VAR: "of"})  # neither on nor off: MKL's choice, and said
    said = f"MKL: its default (AVX2) kernels on this AMD CPU: {mkl_amd.ENV_VAR}='of' is not 0 or 1 | 0"
    assert typo.stdout.strip() == said
    assert python(RESOLVED, **{mkl_amd.ENV_VAR: "false"}).stdout.strip().endswith(f"({mkl_amd.ENV_VAR}=false) | 0")
    late = python(RESOLVED.replace("import ctypes, os; from dreamer.runtime import setup; setup(); import torch", "import ctypes, os, torch; from dreamer.runtime import setup; setup()"))
    assert late.stdout.strip().endswith("torch was imported before dreamer.runtime.setup() | 0")  # said, not pretended
    no_cc = python(RESOLVED, HOME=str(tmp_path / "empty"), CC=str(tmp_path / "no-such-cc"))
    assert no_cc.returncode == 0 and "the AVX-512 shim failed" in no_cc.stdout and no_cc.stdout.endswith("| 0\n")


MATMULS = """
import json; from dreamer.runtime import setup; setup(); import torch
torch.manual_seed(0)
errors = []
for m, k, n in [(15360, 1536, 512), (1024, 512, 1536), (16, 1536, 512), (4097, 255, 33)]:
    a, w, b = torch.randn(m, k), torch.randn(n, k), torch.randn(n)
    exact = b.double() + a.double() @ w.double().t()
    errors.append(float(((torch.addmm(b, a, w.t()) - exact).abs().max() / exact.abs().max())))
x, y = torch.randn(8, 300, 200, requires_grad=True), torch.randn(8, 200, 100, requires_grad=True)
torch.bmm(x, y).square().sum().backward()
exact = 2 * (x.double() @ y.double()) @ y.double().transpose(1, 2)
errors.append(float((x.grad - exact).abs().max() / exact.abs().max()))
print(json.dumps(errors))
"""


@needs_amd
def test_matmuls_with_the_shim_match_float64():
    """float32 rounding only (relative to the largest entry, < 1e-5), forward and backward."""
    proc = python(MATMULS)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert max(json.loads(proc.stdout)) < 1e-5


LOSSES = """
import json; from dreamer.runtime import setup; setup(); import torch
from dreamer.config import LearnerConfig
from dreamer.agent.learner import Learner
from dreamer.agent.model import build_agent
from tests.helpers import LOSSES, PROPRIO, TINY, replay_batch
batch = replay_batch(2, 9, PROPRIO, 1, seed=3)
torch.manual_seed(0)
cfg = LearnerConfig(compile=False, lr_warmup_steps=0, imagination_horizon=4)
learner = Learner(build_agent(TINY, cfg, PROPRIO, 1, "cpu"), cfg)
torch.manual_seed(1)
print(json.dumps([{k: float(v) for k, v in learner.step(batch).items() if k in LOSSES} for _ in range(3)]))
"""


@needs_amd
def test_the_learner_gives_the_same_losses_with_either_kernels():
    """Three eager updates on one batch and seed: every loss within 1e-4 relative (MKL's AVX2 and
    AVX-512 kernels sum in different orders)."""
    runs = [python(LOSSES, **{mkl_amd.ENV_VAR: flag}) for flag in ("0", "1")]
    assert all(run.returncode == 0 for run in runs), runs[0].stderr[-2000:] + runs[1].stderr[-2000:]
    stock, fixed = (json.loads(run.stdout.strip().splitlines()[-1]) for run in runs)
    for before, after in zip(stock, fixed):
        assert before.keys() == after.keys() and len(before) == 7
        for key in before:
            assert after[key] == pytest.approx(before[key], rel=1e-4, abs=1e-6), key
