#!/usr/bin/env bash
# A venv for the official DreamerV3 (JAX, CPU) beside ours, for benchmarks/official_learner.py:
#   bash scripts/official_venv.sh [DIR]        (default /tmp/official: DIR/src and DIR/venv)
# DIR/src is the official code at the commit compared against (git clone, or an existing checkout
# copied there); DIR/venv has the versions its requirements.txt names (jax 0.4.33, CPU build).
set -euo pipefail
DIR=${1:-/tmp/official}
COMMIT=e3f02248693a79dc8b0ebd62c93683888ddaccfe   # danijar/dreamerv3 head when compared
mkdir -p "$DIR"
if [ ! -d "$DIR/src/dreamerv3" ]; then
  git clone --quiet https://github.com/danijar/dreamerv3 "$DIR/src"
  git -C "$DIR/src" checkout --quiet "$COMMIT"
fi
python3 -m venv "$DIR/venv"
"$DIR/venv/bin/pip" install --quiet 'jax[cpu]==0.4.33' jaxlib==0.4.33 chex==0.1.90 einops==0.8.2 \
  elements==3.22.4 granular==0.24.2 jaxtyping==0.3.11 ninjax==3.6.3 numpy==1.26.4 optax==0.2.5 \
  portal==3.8.3 ruamel.yaml==0.19.1 scope==0.8.1 tqdm==4.70.1 colored-traceback==0.4.2
echo "official: $DIR/src @ $(git -C "$DIR/src" rev-parse --short HEAD 2>/dev/null || echo "$COMMIT (no git)"), python $DIR/venv/bin/python"
