// For the io tests: bytes written the way the readers under test expect them.
#ifndef CROUPIER_SRC_IO_IO_TESTING_H_
#define CROUPIER_SRC_IO_IO_TESTING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "croupier/tfrecord.h"
#include "gtest/gtest.h"
#include "src/io/proto_wire.h"

namespace croupier::testing {

// A length-delimited protobuf field: the tag of `field`, the payload's length, the payload.
inline std::string Len(uint32_t field, const std::string& payload) {
  std::string out;
  wire::AppendTag(&out, field, wire::kLengthDelimited);
  wire::AppendVarint(&out, payload.size());
  return out + payload;
}

// Writes `records` as the TFRecord file `path`; a failure fails the calling test (ASSERT).
inline void WriteRecords(const std::string& path, const std::vector<std::string>& records) {
  auto writer = RecordWriter::Create(path);
  ASSERT_TRUE(writer.ok()) << writer.status();
  for (const auto& r : records) ASSERT_TRUE((*writer)->Write(r).ok());
  ASSERT_TRUE((*writer)->Close().ok());
}

}  // namespace croupier::testing

#endif  // CROUPIER_SRC_IO_IO_TESTING_H_
