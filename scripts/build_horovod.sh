#!/usr/bin/env bash
# Builds Horovod from PyPI's source distribution for this machine's PyTorch and TensorFlow, with
# Gloo and OpenMPI, and installs the wheel into .venv. The wheel is cached in .cache/wheels/,
# keyed by the versions of Horovod, torch and TensorFlow, so that a second run only installs it.
# Horovod's Keras wrappers need tf-keras (Keras 2): scripts/requirements-nodeps.txt installs it.
# scripts/bootstrap.sh calls this once per version of scripts/requirements-dev.txt and of this
# script (a stamp in .venv).
#
# Horovod 0.28.1 (the newest release) does not build as released against PyTorch >= 2.1 and
# TensorFlow 2.21; this script edits the unpacked sdist, and only these lines:
#   - CMakeLists.txt and horovod/torch/CMakeLists.txt ask for C++14; PyTorch's headers need C++17
#     (Horovod's own fix, merged after 0.28.1 and not released, does the same for PyTorch >= 2.1).
#   - horovod/tensorflow/CMakeLists.txt compiles xla_mpi_ops.cc, which includes XLA headers that
#     TensorFlow's wheel no longer ships where it expects them; those ops serve XLA on GPUs, so a
#     CPU build leaves the file out.
#   - setup.py builds RelWithDebInfo; Release makes a smaller wheel, built sooner.
# CMake 4 refuses the bundled third-party projects' cmake_minimum_required(2.8); the environment
# sets CMAKE_POLICY_VERSION_MINIMUM=3.5. The build runs under `nice` with 2 jobs (HOROVOD_JOBS).
#
# Usage: scripts/build_horovod.sh [--force]   (--force rebuilds the cached wheel)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
say() { printf '[build_horovod] %s\n' "$*" >&2; }

HOROVOD_VERSION="${HOROVOD_VERSION:-0.28.1}"
py="${CROUPIER_VENV_PYTHON:-$root/.venv/bin/python}"
jobs="${HOROVOD_JOBS:-2}"
force=0
[[ "${1:-}" == "--force" ]] && force=1

versions=$("$py" - <<'EOF'
import torch, tensorflow as tf
print(torch.__version__.replace("+", "_"), tf.__version__)
EOF
)
read -r torch_version tf_version <<<"$versions"
cache="$root/.cache/wheels/horovod-${HOROVOD_VERSION}-torch${torch_version}-tf${tf_version}"
wheel=$(ls "$cache"/horovod-*.whl 2>/dev/null | head -1 || true)

if [[ -z "$wheel" || $force -eq 1 ]]; then
  work=$(mktemp -d "${TMPDIR:-/tmp}/croupier-horovod.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  say "downloading the horovod==$HOROVOD_VERSION source distribution"
  "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    -d "$work" "horovod==$HOROVOD_VERSION"
  tar -xzf "$work/horovod-$HOROVOD_VERSION.tar.gz" -C "$work"
  src="$work/horovod-$HOROVOD_VERSION"

  # The patch: each edit must find its line, so that a changed sdist fails here, by name.
  "$py" - "$src" <<'EOF'
import pathlib, sys
src = pathlib.Path(sys.argv[1])
def edit(path, old, new):
    f = src / path
    text = f.read_text()
    if old not in text:
        sys.exit(f"build_horovod: {path} has no line {old!r} to patch; the sdist has changed")
    f.write_text(text.replace(old, new))
edit("CMakeLists.txt", "set(CMAKE_CXX_STANDARD 14)", "set(CMAKE_CXX_STANDARD 17)")
edit("horovod/torch/CMakeLists.txt", "set(CMAKE_CXX_STANDARD 14)", "set(CMAKE_CXX_STANDARD 17)")
edit("horovod/tensorflow/CMakeLists.txt",
     'list(APPEND TF_SOURCES "${PROJECT_SOURCE_DIR}/horovod/tensorflow/xla_mpi_ops.cc")', "")
edit("setup.py", "else 'RelWithDebInfo'", "else 'Release'")
EOF

  say "building the wheel (PyTorch $torch_version, TensorFlow $tf_version, Gloo, OpenMPI;" \
      "$jobs jobs); about 5 minutes on 2 cores"
  start=$(date +%s)
  mkdir -p "$cache"
  (
    cd "$src"
    export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1
    export HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1
    export CMAKE_POLICY_VERSION_MINIMUM=3.5 MAKEFLAGS="-j$jobs"
    nice "$py" -m pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation \
      -w "$work/dist" . >"$work/build.log" 2>&1 || {
        tail -60 "$work/build.log" >&2
        say "the build failed; the log's end is above"
        exit 1
      }
  )
  rm -f "$cache"/horovod-*.whl
  cp "$work"/dist/horovod-*.whl "$cache/"
  wheel=$(ls "$cache"/horovod-*.whl | head -1)
  say "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $(($(date +%s) - start)) s"
fi

say "installing $(basename "$wheel")"
"$py" -m pip install -q --disable-pip-version-check --no-deps --force-reinstall "$wheel"
"$py" -c "import horovod.torch, horovod.tensorflow"
