#!/usr/bin/env bash
# Installs what croupier needs to build and test, and only what is missing: Debian packages for
# the C++ side, a virtual environment .venv with the Python packages, and Horovod built for that
# environment (scripts/build_horovod.sh, with its wheel cached). Safe to run again; a
# second run with nothing missing takes about a second. Every other entry point calls it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

say() { printf '[bootstrap] %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------------------------
mapfile -t wanted < <(grep -vE '^\s*(#|$)' scripts/debian-packages.txt)
missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
if ((${#missing[@]})); then
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || { say "need root to install: ${missing[*]}"; exit 1; }
    sudo="sudo"
  fi
  say "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# --- Python virtual environment -----------------------------------------------------------------
python="${CROUPIER_PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv with $($python --version 2>&1)"
  "$python" -m venv .venv
fi
stamp=".venv/.croupier-requirements-$(cat scripts/requirements-dev.txt \
  scripts/requirements-nodeps.txt | sha256sum | cut -c1-16)"
if [[ ! -f "$stamp" ]]; then
  say "installing Python packages into .venv"
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  .venv/bin/python -m pip install -q --disable-pip-version-check -r scripts/requirements-dev.txt
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
    -r scripts/requirements-nodeps.txt
  rm -f .venv/.croupier-requirements-*
  touch "$stamp"
fi

# --- Horovod ----------------------------------------------------------------------------------
# Built from PyPI's sdist for this environment's PyTorch and TensorFlow (scripts/build_horovod.sh:
# about 4 minutes on 2 cores the first time; the wheel is kept in .cache/wheels/, so a new .venv
# only installs it). The stamp names the requirements and the build script, so a change of either
# checks again.
hstamp=".venv/.croupier-horovod-$(cat scripts/requirements-dev.txt scripts/build_horovod.sh |
  sha256sum | cut -c1-16)"
if [[ ! -f "$hstamp" ]]; then
  bash scripts/build_horovod.sh
  rm -f .venv/.croupier-horovod-*
  touch "$hstamp"
fi
