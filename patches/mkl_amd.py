"""MKL's AVX-512 kernels on AMD CPUs: every float32 Linear on a CPU learner runs through them.

PyTorch's x86 CPU wheels link Intel MKL for float32 matmuls. MKL chooses its kernels by CPU
vendor as well as by features: on an AMD CPU with AVX-512 (Zen 4 onward) it runs its AVX2 code,
about half the throughput. Measured on this project's machine (AMD EPYC, AVX-512, 2 threads),
[15360, 1536] x [1536, 512] (a head over the imagined states of a size-s update): 112 -> 54 ms
(216 -> 450 GFLOP/s; XLA, the official agent's backend, 59 ms); the size-s proprio learner update
3.06 -> 1.77 s. MKL asks its function `mkl_serv_intel_cpu_true()` whether it runs on Intel; torch
exports it from libtorch_cpu.so and calls it through the dynamic linker, so a one-line library
that answers 1, loaded into the global symbol scope *before* torch, is the one found. Kernels are
still picked by the CPU's features (cpuid): correctness does not depend on the answer
(tests/test_mkl_amd.py checks matmuls against float64).

Applied by dreamer.runtime.setup(), only on an AMD x86-64 Linux CPU that has AVX-512, and
only if torch is not imported yet. The library is built with the C compiler ($CC or cc, the one
inductor needs anyway) into ~/.cache/dreamer-app/ by `make install` (or by the first setup()). DREAMER_MKL_AMD=0 (false, off, no) keeps
MKL's choice; a value that is neither on nor off keeps it too, and the status says why.
`STATUS` says what happened, for the start-up line.
"""
from __future__ import annotations

import ctypes
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ENV_VAR = "DREAMER_MKL_AMD"
SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
LIBRARY = "libmkl_amd_avx512_v1.so"
ACTIVE = "MKL: AVX-512 kernels on this AMD CPU (patches/mkl_amd.py)"
STATUS: str | None = None  # ACTIVE, why not, or None: nothing to do on this CPU


def amd_with_avx512(cpuinfo: str) -> bool:
    """True for /proc/cpuinfo text of an AMD CPU with AVX-512 (foundation) on every core listed."""
    vendors = {line.split(":", 1)[1].strip() for line in cpuinfo.splitlines() if line.startswith("vendor_id")}
    flags = [line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")]
    return vendors == {"AuthenticAMD"} and bool(flags) and all("avx512f" in f for f in flags)


def build(directory: Path) -> Path:
    """The shim library, compiled once (atomically: parallel runs may build it at the same time)."""
    target = directory / LIBRARY
    if target.exists():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise OSError("no C compiler (cc) to build it")
    directory.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        source = Path(tmp) / "shim.c"
        source.write_text(SOURCE)
        built = Path(tmp) / LIBRARY
        subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(source)],
                       check=True, capture_output=True, timeout=60)
        os.replace(built, target)
    return target


def apply(cache: Path) -> str | None:
    """Load the shim (built into `cache`) if this CPU needs it; returns the status line (None: not
    an AMD AVX-512 CPU)."""
    global STATUS
    STATUS = _apply(cache)
    return STATUS


def _apply(cache: Path) -> str | None:
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return None
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    if not amd_with_avx512(cpuinfo):
        return None
    setting = os.environ.get(ENV_VAR, "1").strip().lower()
    if setting in ("0", "false", "off", "no"):
        return f"MKL: its default (AVX2) kernels on this AMD CPU ({ENV_VAR}={setting})"
    if setting not in ("1", "true", "on", "yes"):  # a typo must not silently mean either
        return f"MKL: its default (AVX2) kernels on this AMD CPU: {ENV_VAR}={setting!r} is not 0 or 1"
    if "torch" in sys.modules:
        return "MKL: its default (AVX2) kernels on this AMD CPU: torch was imported before dreamer.runtime.setup()"
    try:
        ctypes.CDLL(str(build(cache)), mode=ctypes.RTLD_GLOBAL)
    except (OSError, subprocess.SubprocessError) as err:
        return f"MKL: its default (AVX2) kernels on this AMD CPU (the AVX-512 shim failed: {err})"
    return ACTIVE

