#!/usr/bin/env bash
# Builds abseil's synchronization library (and the abseil libraries it needs) with
# ThreadSanitizer, from the Debian source package of the exact libabsl-dev version installed, into
# DIR/lib (default build-tsan/abseil). `make tsan` links its binaries with an RPATH to DIR/lib, so
# absl::Mutex, absl::CondVar and absl::Notification, in croupier and inside gRPC alike, tell TSan
# about every lock and wait. Without it TSan cannot see abseil's locking and reports a race on
# every field an absl::Mutex protects (docs/robustness.md, "ThreadSanitizer").
#
# Same version and same absl/base/options.h as the installed headers, so the ABI is the one the
# rest of the build compiles against; the script stops if either differs. Safe to run again: a
# finished build of the same version is reused. It reads the source through apt with a private
# list of deb-src entries (made from the machine's own Debian sources) and changes nothing in
# /etc/apt. About 40 s of build on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$(realpath -m "${1:-$root/build-tsan/abseil}")"
say() { printf '[tsan-abseil] %s\n' "$*" >&2; }

version=$(dpkg-query -W -f='${Version}' libabsl-dev 2>/dev/null) ||
  { say "libabsl-dev is not installed (make bootstrap installs it)"; exit 1; }
stamp="$dir/lib/.built-$version"
if [[ -f "$stamp" ]]; then
  exit 0
fi
say "building abseil $version synchronization with -fsanitize=thread in $dir"
rm -rf "$dir"
mkdir -p "$dir/apt/lists/partial" "$dir/lib"

# A deb-src twin of every Debian source the machine uses, read by a private apt state.
sources=()
for f in /etc/apt/sources.list.d/*.sources; do [[ -f "$f" ]] && sources+=("$f"); done
if ((${#sources[@]})); then
  sed -E 's/^Types:.*/Types: deb-src/' "${sources[@]}" > "$dir/apt/deb-src.sources"
  list="$dir/apt/deb-src.sources"
elif [[ -f /etc/apt/sources.list ]]; then
  sed -nE 's/^deb (.*)/deb-src \1/p' /etc/apt/sources.list > "$dir/apt/sources.list"
  list="$dir/apt/sources.list"
else
  say "no Debian package sources found in /etc/apt"; exit 1
fi
apt_opts=(-o "Dir::Etc::SourceList=$list" -o Dir::Etc::SourceParts=/dev/null
          -o "Dir::State::Lists=$dir/apt/lists" -o Debug::NoLocking=1 -qq)
apt-get "${apt_opts[@]}" update ||
  { say "apt-get update of the deb-src lists failed (sources: $list)"; exit 1; }
(cd "$dir" && apt-get "${apt_opts[@]}" source --download-only "abseil=$version" 2>/dev/null) ||
  { say "cannot download the source of abseil $version through apt"; exit 1; }
(cd "$dir" && dpkg-source -x --no-check abseil_*.dsc src >/dev/null)

# The installed headers are what croupier, gRPC and protobuf were compiled against.
if ! cmp -s "$dir/src/absl/base/options.h" /usr/include/absl/base/options.h; then
  say "absl/base/options.h of the source differs from /usr/include/absl/base/options.h"; exit 1
fi

CC=clang CXX=clang++ cmake -S "$dir/src" -B "$dir/build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_STANDARD=17 -DBUILD_SHARED_LIBS=ON \
  -DABSL_PROPAGATE_CXX_STD=ON -DCMAKE_CXX_FLAGS="-fsanitize=thread -fno-omit-frame-pointer" \
  -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread >/dev/null
nice cmake --build "$dir/build" -j "${SAN_JOBS:-2}" --target synchronization >/dev/null

# Keep only the versioned names the binaries ask for (their SONAMEs).
soversion=$(basename /usr/lib/*/libabsl_synchronization.so.* | grep -E '\.so\.[0-9]+$' | head -1)
soversion=${soversion##*.so.}
find "$dir/build" -name "libabsl_*.so.$soversion" -exec cp -L {} "$dir/lib/" \;
[[ -f "$dir/lib/libabsl_synchronization.so.$soversion" ]] ||
  { say "the build made no libabsl_synchronization.so.$soversion"; exit 1; }
nm -D "$dir/lib/libabsl_synchronization.so.$soversion" | grep -q __tsan_mutex_pre_lock ||
  { say "libabsl_synchronization was built without TSan's mutex annotations"; exit 1; }
touch "$stamp"
say "done: $(ls "$dir/lib" | wc -l) libraries in $dir/lib"
