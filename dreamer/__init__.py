"""Everything that learns: world model, actor-critic, learner, replay, the training loop."""
import os
from pathlib import Path

# Where inductor keeps compiled regions between runs (dreamer/regional.py). Importing torch._dynamo
# (torchrl and tensordict do) sets TORCHINDUCTOR_CACHE_DIR to torch's default under /tmp when it is
# unset, so the app's default is set here, before this package imports torch.
APP_CACHE = Path.home() / ".cache" / "dreamer-app"  # the app's on-disk caches (compiled code)
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(APP_CACHE / "inductor"))

# Before torch too: MKL's AVX-512 kernels on AMD CPUs (dreamer/mkl_amd.py).
from dreamer import mkl_amd  # noqa: E402

mkl_amd.apply(APP_CACHE)
