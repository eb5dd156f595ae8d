// Env over an object store: s3://bucket/key paths read through an S3Client, so that everything
// that reads files through an Env (the record index and its cache, Dataset, the producers'
// TfrecordBatchMaker, the dispatcher's BuildJobInfo) reads objects unchanged.
//
//   OpenForRead, OpenForRandomRead   HEAD once for the size and ETag (none with OpenKnown,
//                                    whose caller knows them); every Read is one ranged GET,
//                                    If-Match that ETag (an object written again since fails
//                                    its reads with DATA_LOSS, "changed since it was indexed");
//                                    ReadRanges merges neighbouring ranges into few GETs, run
//                                    in parallel (S3Client::GetRanges); remote() is true
//   Stat                             HEAD: size, Last-Modified (whole seconds) and ETag
//   ReadWholeFile                    one GET of the whole object (at most 64 MiB), no HEAD
//   Glob, GlobWithStats              ListObjectsV2 over the pattern's prefix, keys matched as a
//                                    shell glob ('*' stops at '/'); no wildcard: HEAD. Each
//                                    match's size, Last-Modified and ETag come with it
//   WriteFileAtomically              PUT of the whole object (how the record indexes that every
//                                    producer shares are stored: SharedDerivedPath)
//   SharedDerivedPath                s3://BUCKET/.croupier-index/BUCKET/KEY+suffix, or under
//                                    CROUPIER_S3_INDEX_PREFIX; "" when that is "off"
//   CreateDirs                       nothing to do (a store has no directories)
//   OpenForWrite, OpenForAppend, Truncate, SyncDir    UNIMPLEMENTED: data objects are only read
//
// Not a file system: nothing is mapped (reads copy from the answer into the caller's buffer),
// and nothing is cached or read ahead here (WillRead does nothing): a reader that knows what it
// will read asks for it ahead in ReadRanges (TfrecordBatchMaker's RecordFetcher).
#ifndef CROUPIER_SRC_S3_S3_ENV_H_
#define CROUPIER_SRC_S3_S3_ENV_H_

#include <memory>
#include <string>
#include <vector>

#include "src/common/env.h"
#include "src/s3/s3_client.h"

namespace croupier::s3 {

// Thread-safe.
class S3Env final : public Env {
 public:
  explicit S3Env(std::shared_ptr<S3Client> client) : client_(std::move(client)) {}

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> OpenKnown(const std::string& path,
                                                              const FileStat& known,
                                                              ReadPattern pattern) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForWrite(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenForAppend(const std::string& path) override;
  absl::Status Truncate(const std::string& path, uint64_t size) override;
  absl::Status SyncDir(const std::string& path) override;
  absl::StatusOr<FileStat> Stat(const std::string& path) override;
  absl::StatusOr<std::string> ReadWholeFile(const std::string& path) override;
  absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) override;
  absl::Status CreateDirs(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> Glob(const std::string& pattern) override;
  absl::StatusOr<std::vector<Listed>> GlobWithStats(const std::string& pattern) override;
  std::string SharedDerivedPath(const std::string& path, absl::string_view suffix) override;

  S3Client& client() { return *client_; }

  // The folder of each bucket where shared derived files go by default. A glob's '*' does not
  // match a leading '.', so `s3://b/*/*` never takes these.
  static constexpr absl::string_view kSharedDerivedDir = ".croupier-index";

 private:
  absl::Status CreateDirsOrNothing(const std::string& path);
  const std::shared_ptr<S3Client> client_;
};

// The Env that Env::Default() is: s3:// paths go to an S3Env whose client is made from the
// environment (S3OptionsFromEnvironment) on the first such path, every other path to `local`.
// When that client cannot be made (no credentials, say), every s3:// call fails with the reason.
// Never deleted.
Env* WithObjectStores(Env* local);

}  // namespace croupier::s3

#endif  // CROUPIER_SRC_S3_S3_ENV_H_
