#!/usr/bin/env bash
# The one-shot device check (benchmarks/gpu_check.py says what it runs): one command, under
# 8 minutes on one H200, results in $OUT (else outputs/gpu_check): gpu_check.json, gpu_check.log.
#   bash scripts/gpu_check.sh            on a GPU machine (make gpu-check)
#   bash scripts/gpu_check.sh --dry-run  the same steps on this CPU, tiny sizes (a test runs it)
# On the device machine (Python 3.12, torch 2.11 + CUDA, no network) the packages of
# requirements-gpu.lock come from .whl/ and the GL libraries from .gl/, both made here by
# scripts/gpu_wheels.sh and carried with the call (carry: [".whl", ".gl"]).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-outputs/gpu_check}"
mkdir -p "$OUT"
PY=$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )
if compgen -G ".whl/*.whl" >/dev/null && ! $PY -c "import torchrl, hydra, dm_control" 2>/dev/null; then
  echo "installing $(ls .whl/*.whl | wc -l) carried wheels into /tmp/gpu_site"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/gpu_site .whl/*.whl
  export PYTHONPATH=/tmp/gpu_site${PYTHONPATH:+:$PYTHONPATH}
fi
if compgen -G ".gl/*.deb" >/dev/null && [ "$(id -u)" = 0 ] && ! ldconfig -p | grep -q "libEGL.so.1 "; then
  echo "unpacking the carried GL libraries"
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if [ -f "$vendor" ] && [ -z "${__EGL_VENDOR_LIBRARY_FILENAMES:-}" ]; then
  export __EGL_VENDOR_LIBRARY_FILENAMES=$vendor  # the driver's EGL, where glvnd does not find it
fi
export MUJOCO_GL=egl
exec $PY -m benchmarks.gpu_check --out "$OUT" "$@"
