#!/usr/bin/env bash
# Prepares, on this machine (it has PyPI and Debian), what the device machine lacks for
# scripts/gpu_check.sh: cp312 wheels of requirements-gpu.lock in .whl/ and the GL libraries' .debs
# in .gl/ (both git-ignored; a device call carries them: carry [".whl", ".gl"]).
#   bash scripts/gpu_wheels.sh        (make gpu-wheels)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
rm -rf .whl && mkdir -p .whl /tmp/gpu_wheels_src
platforms=""
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
         manylinux2014_x86_64 manylinux1_x86_64 any; do platforms="$platforms --platform $p"; done
grep -v '^\s*#' requirements-gpu.lock | grep -v '^\s*$' | while read -r req; do
  if ! $PY -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
       $platforms -d .whl "$req" 2>/dev/null; then
    # sdist only (antlr4-python3-runtime): a pure-Python wheel built here
    $PY -m pip wheel -q --no-deps -w .whl "$req"
  fi
done
# Slim the two big ones (the device call carries 64 MiB at most): assets of tasks the app does not
# offer (locomotion, dog), dm_control's tests and exporter, MuJoCo's GUI ("experimental").
$PY - <<'PY'
import glob, zipfile, os
DROP = ("dm_control/locomotion/", "dm_control/suite/dog_assets/", "dm_control/mujoco/testing/",
        "dm_control/blender/", "dm_control/suite/all_domains.png", "mujoco/experimental/")
for path in glob.glob(".whl/dm_control-*.whl") + glob.glob(".whl/mujoco-*.whl"):
    slim = path + ".slim"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(slim, "w", zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            if not item.filename.startswith(DROP):
                dst.writestr(item, src.read(item.filename))
    before, after = os.path.getsize(path), os.path.getsize(slim)
    os.replace(slim, path)
    print(f"slimmed {os.path.basename(path)}: {before / 2**20:.1f} -> {after / 2**20:.1f} MiB")
PY
# GL libraries for MuJoCo's EGL rendering on the NVIDIA driver (the device README's list)
rm -rf .gl && mkdir -p .gl /tmp/amd64/partial
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
if command -v apt-get >/dev/null; then
  apt-get $o -qq update >/dev/null 2>&1 || true
  (cd .gl && apt-get $o -qq download libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 >/dev/null 2>&1) \
    || echo "warning: could not download the GL .debs (apt-get); rendering on the device may fail"
fi
ls .whl .gl
echo "total: $(du -csm .whl .gl | tail -1 | cut -f1) MiB (a device call carries 64 MiB with the repository)"
