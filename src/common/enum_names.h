// One name table per enum-like setting, and the two functions every such setting needs: its name,
// and the parse of a name into it with the error that lists what is accepted. Settings declare
// their table once (e.g. src/job/job.cc) instead of writing a switch and a chain of compares each.
//
//   constexpr EnumName<Codec> kCodecNames[] = {{Codec::kNone, "none"}, {Codec::kZstd, "zstd"}};
//   NameOf(kCodecNames, Codec::kZstd)                 -> "zstd"
//   ParseName(kCodecNames, "compression", "lz5")      -> INVALID_ARGUMENT "unknown compression
//                                                        'lz5'; expected one of none, zstd"
#ifndef CROUPIER_SRC_COMMON_ENUM_NAMES_H_
#define CROUPIER_SRC_COMMON_ENUM_NAMES_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace croupier {

template <typename E>
struct EnumName {
  E value;
  absl::string_view name;
};

// The name of `value` in `table`; "invalid" for a value the table does not hold.
template <typename E, size_t N>
constexpr absl::string_view NameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "invalid";
}

// "a, b, c": every name of `table`, in its order.
template <typename E, size_t N>
std::string NamesOf(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) absl::StrAppend(&out, i ? ", " : "", table[i].name);
  return out;
}

// The value named `name`; INVALID_ARGUMENT "unknown <what> '<name>'; expected one of ..."
// otherwise.
template <typename E, size_t N>
absl::StatusOr<E> ParseName(const EnumName<E> (&table)[N], absl::string_view what,
                            absl::string_view name) {
  for (const EnumName<E>& entry : table) {
    if (entry.name == name) return entry.value;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown ", what, " '", name, "'; expected one of ", NamesOf(table)));
}

}  // namespace croupier

#endif  // CROUPIER_SRC_COMMON_ENUM_NAMES_H_
