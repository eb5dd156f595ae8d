// A small command-line parser for the croupier subcommands: `--name value`, `--name=value`,
// boolean `--flag`, and positional arguments. Unknown flags are errors, named in the message.
#ifndef CROUPIER_TOOLS_CLI_ARGS_H_
#define CROUPIER_TOOLS_CLI_ARGS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace croupier::cli {

// Thread-compatible.
class Args {
 public:
  // `valued` flags take a value; `booleans` take none.
  static absl::StatusOr<Args> Parse(const std::vector<std::string>& argv,
                                    const std::set<std::string>& valued,
                                    const std::set<std::string>& booleans);

  bool Has(const std::string& flag) const { return values_.count(flag) > 0; }
  std::string Get(const std::string& flag, const std::string& fallback = "") const;
  // The flag's value as an integer in [min, max]; InvalidArgument names the flag otherwise.
  absl::StatusOr<int64_t> GetInt(const std::string& flag, int64_t fallback, int64_t min,
                                 int64_t max) const;
  absl::StatusOr<uint64_t> GetUint(const std::string& flag, uint64_t fallback) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace croupier::cli

#endif  // CROUPIER_TOOLS_CLI_ARGS_H_
