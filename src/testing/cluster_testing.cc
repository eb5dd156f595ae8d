#include "src/testing/cluster_testing.h"

#include <utility>

#include "croupier/plan.h"
#include "src/common/status_macros.h"
#include "src/job/job.h"
#include "src/job/job_settings.h"
#include "src/producer/producer_testing.h"

namespace croupier::testing {

std::unique_ptr<TestCluster> ClusterWithDataset(TestClusterOptions options) {
  std::unique_ptr<TestCluster> cluster = Must(TestCluster::Start(std::move(options)));
  if (cluster) WriteDataset(cluster->dir(), {50, 40, 30});
  return cluster;
}

v1::JobSpec DatasetSpec(const std::string& dir, uint32_t consumers, const std::string& mode) {
  v1::JobSpec spec;
  spec.set_name("train");
  spec.add_files(dir + "/part-*.tfrecord");
  spec.set_features(kFeatures);
  spec.set_batch_size(4);
  spec.set_num_consumers(consumers);
  spec.set_seed(11);
  spec.set_num_epochs(2);
  EXPECT_TRUE(SetSettingsFromText({.mode = mode}, spec).ok());
  return spec;
}

std::vector<std::vector<std::vector<int64_t>>> PlannedIds(const v1::JobInfo& job, uint64_t epoch) {
  const JobConfig config = Must(ParseJobConfig(job));
  const EpochPlan plan = Must(EpochPlan::Create(config.plan, epoch));
  std::vector<std::vector<std::vector<int64_t>>> out(config.num_consumers());
  for (uint64_t g = 0; g < plan.num_batches(); ++g) {
    std::vector<int64_t> ids;
    for (uint64_t id : plan.BatchRecords(g)) ids.push_back(static_cast<int64_t>(id));
    out[g % config.num_consumers()].push_back(std::move(ids));
  }
  return out;
}

absl::StatusOr<std::vector<uint64_t>> ReadEpoch(Consumer& consumer, uint64_t epoch, uint64_t step) {
  RETURN_IF_ERROR(consumer.StartEpoch(epoch, step));
  std::vector<uint64_t> hashes;
  while (true) {
    ASSIGN_OR_RETURN(std::optional<Batch> batch, consumer.Next());
    if (!batch) return hashes;
    hashes.push_back(batch->ContentHash());
  }
}

absl::StatusOr<std::vector<std::vector<int64_t>>> ReadEpochIds(Consumer& consumer, uint64_t epoch,
                                                               absl::Duration per_batch) {
  RETURN_IF_ERROR(consumer.StartEpoch(epoch, 0));
  std::vector<std::vector<int64_t>> out;
  while (true) {
    ASSIGN_OR_RETURN(std::optional<Batch> batch, consumer.Next());
    if (!batch) return out;
    const ColumnView* id = batch->view().Find("id");
    if (id == nullptr) return absl::NotFoundError("the batch has no feature 'id'");
    absl::Span<const int64_t> ids = id->ints();
    out.emplace_back(ids.begin(), ids.end());
    absl::SleepFor(per_batch);
  }
}

}  // namespace croupier::testing
