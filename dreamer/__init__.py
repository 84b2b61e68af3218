"""Everything that learns: world model, actor-critic, learner, replay, the training loop."""
import os
from pathlib import Path

# Where inductor keeps compiled regions between runs (dreamer/regional.py). Importing torch._dynamo
# (torchrl and tensordict do) sets TORCHINDUCTOR_CACHE_DIR to torch's default under /tmp when it is
# unset, so the app's default is set here, before this package imports torch.
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(Path.home() / ".cache" / "dreamer-app" / "inductor"))

# Before torch too: MKL's AVX-512 kernels on AMD CPUs (dreamer/mkl_amd.py).
from dreamer import mkl_amd  # noqa: E402

mkl_amd.apply()
