#!/usr/bin/env bash
# Installs what croupier needs, and only what is missing, for one of four tiers:
#   build    what building croupier needs: the Debian packages of scripts/debian-packages.txt and
#            a virtual environment .venv with scripts/requirements-build.txt;
#   demo     the Python packages that croupier and `make demo` run with
#            (scripts/requirements-demo.txt), once the build tier is in;
#   test     (the default) all of that, and what the tests, the hardening runs and the benchmarks
#            need: scripts/debian-packages-test.txt and scripts/requirements-dev.txt
#            (TensorFlow, JAX, Ray, ...);
#   engines  all of that, and Horovod built for that environment (scripts/build_horovod.sh, with
#            its wheel cached), for `make test-engines`.
# Safe to run again; a second run with nothing missing takes about a second. Every entry point of
# the Makefile calls it with the tier it needs.
#
# Usage: scripts/bootstrap.sh [build|demo|test|engines]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

say() { printf '[bootstrap] %s\n' "$*" >&2; }

tier="${1:-test}"
case "$tier" in
  build) debian_lists=(scripts/debian-packages.txt)
         python_lists=(scripts/requirements-build.txt) ;;
  demo)  debian_lists=(scripts/debian-packages.txt)
         python_lists=(scripts/requirements-build.txt scripts/requirements-demo.txt) ;;
  test|engines)
         debian_lists=(scripts/debian-packages.txt scripts/debian-packages-test.txt)
         python_lists=(scripts/requirements-build.txt scripts/requirements-demo.txt
                       scripts/requirements-dev.txt
                       scripts/requirements-nodeps.txt) ;;
  *) say "unknown tier '$tier' (build, demo, test or engines)"; exit 2 ;;
esac
# The engines tier installs the test tier's packages under the test tier's stamp.
packages_tier="${tier/engines/test}"

# --- Debian packages -------------------------------------------------------------------------
mapfile -t wanted < <(cat "${debian_lists[@]}" | grep -vE '^\s*(#|$)')
missing=()
for pkg in "${wanted[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
sudo=""
if ((${#missing[@]})) && [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { say "need root to install: ${missing[*]}"; exit 1; }
  sudo="sudo"
fi
install_debian() {
  local start=$SECONDS
  say "installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  say "Debian packages installed ($((SECONDS - start)) s)"
}

# --- Python virtual environment -----------------------------------------------------------------
python="${CROUPIER_PYTHON:-python3}"
# One stamp per tier, named by the hash of its lists: a change of a list installs again.
stamp=".venv/.croupier-$packages_tier-$(cat "${python_lists[@]}" | sha256sum | cut -c1-16)"
install_python() {
  local start=$SECONDS
  if [[ ! -x .venv/bin/python ]]; then
    say "creating .venv with $($python --version 2>&1)"
    "$python" -m venv .venv
  fi
  local pip=(.venv/bin/python -m pip install -q --disable-pip-version-check)
  say "installing the Python packages of the $packages_tier tier into .venv"
  "${pip[@]}" --upgrade pip
  if [[ "$tier" == build || "$tier" == demo ]]; then
    "${pip[@]}" -r "${python_lists[-1]}"
  else
    "${pip[@]}" -r scripts/requirements-dev.txt
    "${pip[@]}" --no-deps -r scripts/requirements-nodeps.txt
  fi
  rm -f .venv/.croupier-"$packages_tier"-* .venv/.croupier-requirements-*
  touch "$stamp"
  say "Python packages installed ($((SECONDS - start)) s)"
}

# The two installs share nothing when this Python can make a virtual environment before the
# Debian packages are in (python3-venv is one of them), and while every pinned Python package comes
# as a wheel, compiled against no Debian header (so on 30 November: `pip install --dry-run
# --ignore-installed --only-binary=:all:` on each list). Then they run side by side, which can save
# up to the shorter of the two (docs/build.md measures it). Both run to their end before a failure
# of either stops the bootstrap, so that apt is never left half done.
need_python=0
[[ -f "$stamp" ]] || need_python=1
side_by_side=0
if ((${#missing[@]} && need_python)); then
  if [[ -x .venv/bin/python ]] || "$python" -c 'import ensurepip, venv' 2>/dev/null; then
    side_by_side=1
  fi
fi
if ((side_by_side)); then
  debian_rc=0 python_rc=0
  # Both in the background: errexit holds inside each (it would not in a `... || rc=$?` list).
  install_debian &
  debian_pid=$!
  install_python &
  python_pid=$!
  wait "$python_pid" || python_rc=$?
  wait "$debian_pid" || debian_rc=$?
  ((debian_rc == 0)) || { say "installing the Debian packages failed (exit $debian_rc)"; exit 1; }
  ((python_rc == 0)) || { say "installing the Python packages failed (exit $python_rc)"; exit 1; }
else
  if ((${#missing[@]})); then install_debian; fi
  if ((need_python)); then install_python; fi
fi
[[ "$tier" == engines ]] || exit 0

# --- Horovod ----------------------------------------------------------------------------------
# Built from PyPI's sdist for this environment's PyTorch and TensorFlow (scripts/build_horovod.sh:
# about 4 minutes on 2 cores the first time; the wheel is kept in .cache/wheels/, so a new .venv
# only installs it). The stamp names the requirements and the build script, so a change of either
# checks again.
hstamp=".venv/.croupier-horovod-$(cat scripts/requirements-build.txt scripts/requirements-demo.txt \
  scripts/requirements-dev.txt \
  scripts/build_horovod.sh |
  sha256sum | cut -c1-16)"
if [[ ! -f "$hstamp" ]]; then
  bash scripts/build_horovod.sh
  rm -f .venv/.croupier-horovod-*
  touch "$hstamp"
fi
