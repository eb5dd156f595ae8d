#include "absl/strings/str_cat.h"
#include "croupier/tfrecord.h"
#include "src/common/env.h"
#include "src/common/status_macros.h"
#include "src/io/tfrecord_format.h"

namespace croupier {
namespace {
constexpr size_t kFlushBytes = 1 << 20;
}  // namespace

absl::StatusOr<std::unique_ptr<RecordWriter>> RecordWriter::Create(const std::string& path,
                                                                   Env* env) {
  if (env == nullptr) env = Env::Default();
  ASSIGN_OR_RETURN(auto file, env->OpenForWrite(path));
  return std::unique_ptr<RecordWriter>(new RecordWriter(std::move(file)));
}

RecordWriter::RecordWriter(std::unique_ptr<WritableFile> file) : file_(std::move(file)) {}

RecordWriter::~RecordWriter() { Close().IgnoreError(); }

absl::Status RecordWriter::Write(absl::string_view record) {
  if (file_ == nullptr) return absl::FailedPreconditionError("the record writer is closed");
  char header[kRecordHeaderBytes];
  tfrecord::EncodeHeader(header, record.size());
  char footer[kRecordFooterBytes];
  tfrecord::EncodeU32(footer, crc32c::Mask(crc32c::Value(record)));
  pending_.append(header, sizeof(header));
  pending_.append(record.data(), record.size());
  pending_.append(footer, sizeof(footer));
  offset_ += record.size() + kRecordOverheadBytes;
  if (pending_.size() >= kFlushBytes) return Flush();
  return absl::OkStatus();
}

absl::Status RecordWriter::Flush() {
  absl::Status s = file_->Append(pending_);
  pending_.clear();
  return s;
}

absl::Status RecordWriter::Close() {
  if (file_ == nullptr) return absl::OkStatus();
  absl::Status s = Flush();
  absl::Status c = file_->Close();
  file_.reset();
  return s.ok() ? c : s;
}

}  // namespace croupier
