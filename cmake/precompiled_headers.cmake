# Precompiled headers: the third-party headers that most files include (the C++ library, abseil,
# the generated protobuf headers, GoogleTest, pybind11) are parsed once per group of targets
# instead of once per file. Parsing them was most of a typical file's compile time: a producer
# file of 1.4 s spent 1.3 s in its includes alone (g++ -O3; docs/build.md has the figures).
#
# A precompiled header serves only compiles with the same flags: -fPIC (libraries) and -fPIE
# (executables) differ, as do pybind11's flags, so each group has its own. gRPC's headers are left
# out: few files include them, and a larger header costs every file that loads it.
#
# CROUPIER_PCH=OFF builds without them (the same as CMAKE_DISABLE_PRECOMPILE_HEADERS=ON).
option(CROUPIER_PCH "Precompile the third-party headers most files include" ON)

# Headers of the core library (no protobuf: the core parses the Example wire format itself).
set(CROUPIER_PCH_CORE
  <algorithm> <atomic> <cstdint> <cstring> <functional> <map> <memory> <optional> <string>
  <string_view> <thread> <utility> <vector>
  <absl/container/flat_hash_map.h> <absl/status/status.h> <absl/status/statusor.h>
  <absl/strings/str_cat.h> <absl/strings/str_format.h> <absl/strings/string_view.h>
  <absl/synchronization/mutex.h> <absl/time/clock.h> <absl/time/time.h> <absl/types/span.h>)
# The service adds the generated control-plane and journal messages.
set(CROUPIER_PCH_SERVICE ${CROUPIER_PCH_CORE} <proto/croupier.pb.h> <proto/journal.pb.h>)
set(CROUPIER_PCH_TEST <gmock/gmock.h> <gtest/gtest.h>)

# A compiler cache must hash the precompiled header instead of the text it replaces: ccache needs
# the sloppiness below (its manual, "Precompiled headers"), -fpch-preprocess with gcc and
# -fno-pch-timestamp with clang (a header's time stamp, which differs in every clone, would make a
# cached header unusable). Every file now names the precompiled header by its path in the build
# directory, so ccache's base directory is the source tree: paths inside it are hashed relative,
# and a second clone with its build directory at the same place in it (build/) hits the cache.
if(CROUPIER_CCACHE AND CMAKE_CXX_COMPILER_LAUNCHER STREQUAL CROUPIER_CCACHE)
  set(croupier_ccache_env "")
  if(CROUPIER_PCH)
    list(APPEND croupier_ccache_env
         CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime)
  endif()
  if(NOT DEFINED ENV{CCACHE_BASEDIR})
    list(APPEND croupier_ccache_env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR})
  endif()
  if(croupier_ccache_env)
    set(CMAKE_CXX_COMPILER_LAUNCHER env ${croupier_ccache_env} ${CROUPIER_CCACHE})
  endif()
endif()
if(CROUPIER_PCH)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-fpch-preprocess)
  elseif(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    add_compile_options("SHELL:-Xclang -fno-pch-timestamp")
  endif()
endif()

# croupier_pch(TARGET header...): TARGET precompiles these headers.
function(croupier_pch target)
  if(CROUPIER_PCH)
    target_precompile_headers(${target} PRIVATE ${ARGN})
  endif()
endfunction()

# croupier_pch_reuse(TARGET OWNER): TARGET uses OWNER's precompiled header (same flags).
function(croupier_pch_reuse target owner)
  if(CROUPIER_PCH)
    target_precompile_headers(${target} REUSE_FROM ${owner})
  endif()
endfunction()
