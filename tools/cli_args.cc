#include "tools/cli_args.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace croupier::cli {

absl::StatusOr<Args> Args::Parse(const std::vector<std::string>& argv,
                                 const std::set<std::string>& valued,
                                 const std::set<std::string>& booleans) {
  Args args;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& a = argv[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      args.positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(2), value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (booleans.count(name)) {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      args.values_[name] = "true";
    } else if (valued.count(name)) {
      if (!has_value) {
        if (i + 1 >= argv.size()) {
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        }
        value = argv[++i];
      }
      args.values_[name] = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name));
    }
  }
  return args;
}

std::string Args::Get(const std::string& flag, const std::string& fallback) const {
  auto it = values_.find(flag);
  return it == values_.end() ? fallback : it->second;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& flag, int64_t fallback, int64_t min,
                                     int64_t max) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  int64_t v;
  if (!absl::SimpleAtoi(it->second, &v) || v < min || v > max) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " must be an integer from ", min,
                                                   " to ", max, ", not '", it->second, "'"));
  }
  return v;
}

absl::StatusOr<uint64_t> Args::GetUint(const std::string& flag, uint64_t fallback) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return fallback;
  uint64_t v;
  if (!absl::SimpleAtoi(it->second, &v)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be a non-negative integer, not '", it->second, "'"));
  }
  return v;
}

}  // namespace croupier::cli
