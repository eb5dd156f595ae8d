// The JSON forms of the control plane's messages that users read and write (the command line's
// --json, the Python API, the dispatcher's api/status): protobuf's JSON mapping, except that a
// job's enum settings (src/job/job_settings.h) are written and read by their text names, as the
// command line and the Python API take them: "shuffle": "global", not "SHUFFLE_GLOBAL"; an
// UNSPECIFIED setting is "".
#ifndef CROUPIER_SRC_JOB_JOB_JSON_H_
#define CROUPIER_SRC_JOB_JOB_JSON_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "google/protobuf/util/json_util.h"

namespace croupier {

// `message` as JSON printed with `options`, its settings by their text names. With
// int64_as_numbers (the Python API's dicts), the 64-bit integer fields that protobuf's JSON writes
// as strings ("43") are numbers (43) where a double holds them exactly (|v| <= 2^53); larger ones
// stay strings. Fields inside maps are left as protobuf writes them.
std::string ToUserJson(const google::protobuf::Message& message,
                       const google::protobuf::util::JsonPrintOptions& options,
                       bool int64_as_numbers = false);

// Parses `json` into `message`, its settings given by their text names. INVALID_ARGUMENT for
// JSON that does not fit the message, or a setting's unknown name (listing the accepted ones).
absl::Status FromUserJson(absl::string_view json, google::protobuf::Message* message);

}  // namespace croupier

#endif  // CROUPIER_SRC_JOB_JOB_JSON_H_
