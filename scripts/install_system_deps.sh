#!/usr/bin/env bash
# Debian libraries MuJoCo needs to render offscreen without a display:
# EGL with Mesa's llvmpipe on a CPU-only machine (MUJOCO_GL=egl), the NVIDIA EGL driver on a GPU box.
set -euo pipefail
pkgs=(libegl1 libegl-mesa0 libgl1-mesa-dri libgl1 libglx-mesa0)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]} == 0)); then exit 0; fi
echo "installing Debian packages for headless MuJoCo rendering: ${missing[*]}"
sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
