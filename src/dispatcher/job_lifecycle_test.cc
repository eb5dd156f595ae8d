// A job's life: its state (idle, running, done), the bounded status that summarizes it, its
// deletion (DeleteJob, JobDeleted) and the expiry of done jobs after the retention.
#include <chrono>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "src/dispatcher/journal.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAreArray;

class JobLifecycleTest : public testing::DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    // 40 records in batches of 2 for 2 consumers: 20 batches, 10 steps per epoch.
    WriteData({40});
    Restart();
  }

  // A dispatcher on the journal in the temp dir (a new one on the same journal: a restart).
  void Restart(absl::Duration retention = absl::InfiniteDuration()) {
    impl_.reset();
    DispatcherOptions options;
    options.journal_path = dir_.Join("journal");
    options.journal_sync = false;
    options.job_retention = retention;
    Recreate(options);
  }

  v1::JobSummary Summary(const std::string& job) {
    v1::GetJobRequest request;
    request.set_name(job);
    auto r = impl_->GetJob(request);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->summary() : v1::JobSummary();
  }

  absl::StatusOr<v1::DeleteJobResponse> Delete(const std::string& job, bool force = false) {
    v1::DeleteJobRequest request;
    request.set_name(job);
    request.set_force(force);
    return impl_->DeleteJob(request);
  }

  absl::StatusOr<v1::ConsumerHeartbeatResponse> Leave(uint64_t id, const std::string& job,
                                                      uint32_t rank) {
    v1::ConsumerHeartbeatRequest request;
    request.set_consumer_id(id);
    request.set_job(job);
    request.set_rank(rank);
    request.set_world(2);
    request.set_epoch(1);
    request.set_leaving(true);
    request.set_lease(Lease(id));  // only the consumer itself may give up its rank
    return impl_->ConsumerHeartbeat(request);
  }

  // Both ranks of `job` (1 epoch) read it to the end and leave: consumers `first`, `first` + 1.
  void ReadToTheEnd(const std::string& job, uint64_t first) {
    ASSERT_TRUE(Consumer(0, job, 0, 2).ok());
    ASSERT_TRUE(Consumer(0, job, 1, 2).ok());
    ASSERT_TRUE(Consumer(first, job, 0, 2, 0, 10).ok());
    ASSERT_TRUE(Consumer(first + 1, job, 1, 2, 1, 0).ok());
    ASSERT_TRUE(Leave(first, job, 0).ok());
    ASSERT_TRUE(Leave(first + 1, job, 1).ok());
  }
};

TEST_F(JobLifecycleTest, ABoundedJobIsIdleThenRunningThenDoneWhenEveryRankIsAtTheEnd) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/1)).ok());
  EXPECT_EQ(Summary("train").state(), v1::JOB_STATE_IDLE);
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  auto r = Consumer(0, "train", 1, 2);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job_state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(Summary("train").state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(Consumer(1, "train", 0, 2, 0, 10).ok());
  EXPECT_EQ(Summary("train").state(), v1::JOB_STATE_RUNNING);  // rank 1 is not at the end yet
  r = Consumer(2, "train", 1, 2, 0, 10);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job_state(), v1::JOB_STATE_DONE);
  EXPECT_EQ(Summary("train").state(), v1::JOB_STATE_DONE);
  // A rank that goes back (a checkpoint restored) makes it running again.
  ASSERT_TRUE(Consumer(1, "train", 0, 2, 0, 4).ok());
  EXPECT_EQ(Summary("train").state(), v1::JOB_STATE_RUNNING);
}

TEST_F(JobLifecycleTest, AResumedTrainerOfADoneJobIsToldItIsDone) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/1)).ok());
  ReadToTheEnd("train", 1);
  EXPECT_EQ(Summary("train").state(), v1::JOB_STATE_DONE);
  v1::ConsumerHeartbeatRequest request;
  request.set_job("train");
  request.set_rank(0);
  request.set_world(2);
  request.set_resume(true);
  auto r = impl_->ConsumerHeartbeat(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->epoch(), 1u);
  EXPECT_EQ(r->job_state(), v1::JOB_STATE_DONE);
}

TEST_F(JobLifecycleTest, AFirstComeJobIsDoneWhenEveryTaskIsServed) {
  v1::JobSpec spec = Spec("fc", 2, 2, /*num_epochs=*/2);
  spec.set_mode(v1::DEAL_MODE_FIRST_COME);
  ASSERT_TRUE(Create(spec).ok());
  ASSERT_TRUE(Consumer(0, "fc", 0, 2).ok());
  auto p = Producer(0, "h:1", kMaxTasksPerHeartbeat);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<uint64_t> tasks;
  for (const v1::Task& t : p->new_tasks()) tasks.push_back(t.task_id());
  ASSERT_FALSE(tasks.empty());
  EXPECT_EQ(Summary("fc").state(), v1::JOB_STATE_RUNNING);
  ASSERT_TRUE(Producer(1, "h:1", 0, tasks).ok());
  const v1::JobSummary summary = Summary("fc");
  EXPECT_EQ(summary.state(), v1::JOB_STATE_DONE);
  EXPECT_EQ(summary.batches_finished(), 40u);
  EXPECT_EQ(summary.tasks_outstanding(), 0u);
}

TEST_F(JobLifecycleTest, AnUnboundedJobIsNeverDone) {
  ASSERT_TRUE(Create(Spec("forever", 2, 2, /*num_epochs=*/0)).ok());
  ASSERT_TRUE(Consumer(0, "forever", 0, 2).ok());
  ASSERT_TRUE(Consumer(0, "forever", 1, 2).ok());
  ASSERT_TRUE(Consumer(1, "forever", 0, 2, 7, 10).ok());
  ASSERT_TRUE(Consumer(2, "forever", 1, 2, 7, 10).ok());
  EXPECT_EQ(Summary("forever").state(), v1::JOB_STATE_RUNNING);
}

TEST_F(JobLifecycleTest, StatusListsSummariesAndTheFileListsOnlyOnRequest) {
  ASSERT_TRUE(Create(Spec("a", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Create(Spec("b", 2, 2, /*num_epochs=*/0)).ok());
  ASSERT_TRUE(Consumer(0, "b", 1, 2).ok());
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_THAT(status->jobs(), IsEmpty());
  ASSERT_EQ(status->job_summaries_size(), 2);
  const v1::JobSummary& a = status->job_summaries(0);
  EXPECT_EQ(a.name(), "a");
  EXPECT_EQ(a.state(), v1::JOB_STATE_IDLE);
  EXPECT_EQ(a.num_files(), 1u);
  EXPECT_EQ(a.num_records(), 40u);
  EXPECT_EQ(a.steps_per_epoch(), 10u);
  EXPECT_EQ(a.num_epochs(), 1u);
  EXPECT_EQ(a.seconds_to_expiry(), -1);
  EXPECT_EQ(status->job_summaries(1).name(), "b");
  EXPECT_EQ(status->job_summaries(1).state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(status->job_summaries(1).consumers(), 1u);
  EXPECT_EQ(status->job_retention_seconds(), 0);

  v1::StatusRequest whole;
  whole.set_include_job_info(true);
  status = impl_->GetStatus(whole);
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->jobs_size(), 2);
  EXPECT_EQ(status->jobs(0).files_size(), 1);
}

TEST_F(JobLifecycleTest, GetJobGivesTheSummaryAndTheRankPositions) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2, 0, 3).ok());
  v1::GetJobRequest request;
  request.set_name("train");
  auto r = impl_->GetJob(request);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job().spec().name(), "train");
  EXPECT_EQ(r->summary().state(), v1::JOB_STATE_RUNNING);
  ASSERT_EQ(r->rank_positions_size(), 1);
  EXPECT_EQ(r->rank_positions(0).rank(), 1u);
  EXPECT_EQ(r->rank_positions(0).step(), 3u);
}

TEST_F(JobLifecycleTest, DeletingAJobWithConsumersNeedsForce) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());  // consumer 1
  auto d = Delete("train");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition) << d.status();
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("consumer 1 (rank 1)"));
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("--force"));
  d = Delete("train", /*force=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->consumers_removed(), 1u);
  EXPECT_EQ(d->job().name(), "train");
  EXPECT_EQ(d->job().state(), v1::JOB_STATE_RUNNING);
  // The removed consumer hears so at its next heartbeat; the job is gone.
  auto c = Consumer(1, "train", 1, 2);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound) << c.status();
  EXPECT_THAT(std::string(c.status().message()), HasSubstr("job 'train' deleted"));
  v1::GetJobRequest get;
  get.set_name("train");
  EXPECT_EQ(impl_->GetJob(get).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Delete("train").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(Delete("nothing").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(JobLifecycleTest, DeletingRevokesTheJobsTasksAndFreesItsName) {
  ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Create(Spec("other", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  auto p = Producer(0, "h:1", 2);
  ASSERT_TRUE(p.ok()) << p.status();
  std::vector<uint64_t> held;
  for (const v1::Task& t : p->new_tasks()) held.push_back(t.task_id());
  ASSERT_FALSE(held.empty());
  auto d = Delete("train", /*force=*/true);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->tasks_revoked(), held.size());
  p = Producer(1, "h:1", 0);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_THAT(p->revoked_tasks(), UnorderedElementsAreArray(held));
  EXPECT_THAT(impl_->StateDebugString(), Not(HasSubstr("'train'")));

  // A new job of the same name is another job: the producer is sent its JobInfo again.
  v1::JobSpec spec = Spec("train", 4, 2, /*num_epochs=*/1);
  auto created = Create(spec);
  ASSERT_TRUE(created.ok()) << created.status();
  ASSERT_TRUE(Consumer(0, "train", 0, 2).ok());
  p = Producer(1, "h:1", 1);
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_EQ(p->new_tasks_size(), 1);
  EXPECT_EQ(p->new_tasks(0).job(), "train");
  ASSERT_EQ(p->jobs_size(), 1);
  EXPECT_EQ(p->jobs(0).spec().batch_size(), 4u);
}

TEST_F(JobLifecycleTest, ADeletionIsReplayed) {
  ASSERT_TRUE(Create(Spec("a", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Create(Spec("b", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Create(Spec("c", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Consumer(0, "b", 0, 2).ok());
  ASSERT_TRUE(Producer(0, "h:1", 1).ok());
  ASSERT_TRUE(Delete("b", /*force=*/true).ok());
  const std::string before = impl_->StateDebugString();
  EXPECT_THAT(before, HasSubstr("job 1 {spec { name: \"c\""));  // c is second now
  Restart();
  EXPECT_EQ(impl_->StateDebugString(), before);
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok());
  ASSERT_EQ(status->job_summaries_size(), 2);
  EXPECT_EQ(status->job_summaries(1).name(), "c");
}

TEST_F(JobLifecycleTest, DoneJobsExpireAfterTheRetentionOnceNobodyReadsThem) {
  Restart(/*retention=*/absl::Minutes(10));
  ASSERT_TRUE(Create(Spec("done", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Create(Spec("read", 2, 2, /*num_epochs=*/1)).ok());
  ASSERT_TRUE(Create(Spec("forever", 2, 2, /*num_epochs=*/0)).ok());
  ReadToTheEnd("done", 1);
  // "read" is done too, but a consumer still holds a rank of it.
  ASSERT_TRUE(Consumer(0, "read", 0, 2).ok());  // consumer 3
  ASSERT_TRUE(Consumer(0, "read", 1, 2).ok());  // consumer 4
  ASSERT_TRUE(Consumer(3, "read", 0, 2, 1, 0).ok());
  ASSERT_TRUE(Consumer(4, "read", 1, 2, 1, 0).ok());
  ASSERT_TRUE(Leave(4, "read", 1).ok());
  impl_->Tick();  // notes when they became done
  auto status = impl_->GetStatus({});
  ASSERT_TRUE(status.ok());
  EXPECT_EQ(status->job_retention_seconds(), 600);
  EXPECT_EQ(status->job_summaries(0).state(), v1::JOB_STATE_DONE);
  EXPECT_EQ(status->job_summaries(0).seconds_to_expiry(), 600);
  for (int i = 0; i < 9; ++i) {
    clock_->Advance(absl::Minutes(1));
    ASSERT_TRUE(Consumer(3, "read", 0, 2, 1, 0).ok());  // keeps its consumer alive
    impl_->Tick();
  }
  status = impl_->GetStatus({});
  ASSERT_EQ(status->job_summaries_size(), 3);
  EXPECT_EQ(status->job_summaries(0).seconds_done(), 540);
  EXPECT_EQ(status->job_summaries(0).seconds_to_expiry(), 60);
  clock_->Advance(absl::Minutes(1));
  ASSERT_TRUE(Consumer(3, "read", 0, 2, 1, 0).ok());
  impl_->Tick();
  status = impl_->GetStatus({});
  ASSERT_EQ(status->job_summaries_size(), 2);
  EXPECT_EQ(status->job_summaries(0).name(), "read");
  EXPECT_EQ(status->job_summaries(1).name(), "forever");
  // Once its consumer leaves, the other done job goes at the next Tick (done for long enough).
  ASSERT_TRUE(Leave(3, "read", 0).ok());
  impl_->Tick();
  status = impl_->GetStatus({});
  ASSERT_EQ(status->job_summaries_size(), 1);
  EXPECT_EQ(status->job_summaries(0).name(), "forever");
  // The expiry was journaled: a restart does not bring them back.
  Restart(absl::Minutes(10));
  status = impl_->GetStatus({});
  ASSERT_EQ(status->job_summaries_size(), 1);
}

// The state machine: JobDeleted's checks and what it leaves.
TEST(JobDeletedTest, RefusesUnknownJobsJobsWithConsumersAndJobsWithSources) {
  using namespace testing;  // NOLINT: the update builders
  DispatcherState state;
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("a", 8, 2, 4, 1))).ok());
  ASSERT_TRUE(state.Apply(JobCreated(FakePythonJob("py", 8, 2, 4, 1))).ok());
  journal::Update del;
  del.mutable_job_deleted()->set_job("zz");
  EXPECT_EQ(state.Apply(del).code(), absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(state.Apply(ConsumerRegistered(1, "a", 0)).ok());
  del.mutable_job_deleted()->set_job("a");
  absl::Status s = state.Apply(del);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("1 consumers hold ranks"));
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1", "py")).ok());
  del.mutable_job_deleted()->set_job("py");
  s = state.Apply(del);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("producer 1 is its source"));
}

TEST(JobDeletedTest, DropsTheTasksAndKeepsTheTurnOfTheOthers) {
  using namespace testing;  // NOLINT: the update builders
  DispatcherState state;
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(state.Apply(JobCreated(FakeJob(name, 8, 2, 4, 1))).ok());
  }
  ASSERT_TRUE(state.Apply(ProducerRegistered(1, "h:1")).ok());
  ASSERT_TRUE(state.Apply(ProducerRegistered(2, "h:2")).ok());
  ASSERT_TRUE(state.Apply(TaskAssigned(MakeTask(1, "b", 0, 0, 4), 1)).ok());
  ASSERT_TRUE(state.Apply(TaskAssigned(MakeTask(2, "b", 0, 4, 4), 2)).ok());
  ASSERT_TRUE(state.Apply(ProducerRemoved(2)).ok());  // task 2 is an orphan
  ASSERT_EQ(state.last_cut_job(), "b");
  journal::Update del;
  del.mutable_job_deleted()->set_job("b");
  ASSERT_TRUE(state.Apply(del).ok());
  EXPECT_EQ(state.FindJob("b"), nullptr);
  EXPECT_THAT(state.job_order(), ElementsAre("a", "c"));
  EXPECT_EQ(state.FindJob("c")->sequence, 1u);
  EXPECT_EQ(state.FindTask(1), nullptr);
  EXPECT_THAT(state.FindProducer(1)->tasks, IsEmpty());
  EXPECT_THAT(state.orphans(), IsEmpty());
  // The turn after b's was c's: it still is.
  EXPECT_EQ(state.last_cut_job(), "a");
  ASSERT_TRUE(state.Apply(JobCreated(FakeJob("b", 8, 2, 4, 1))).ok());
  EXPECT_EQ(state.FindJob("b")->sequence, 2u);
}

// 1,000 jobs of 1,000 files each: the status summarizes them in well under 1 MiB, where their
// whole JobInfos (the status before summaries) pass the 16 MiB control message limit.
TEST(JobStatusScaleTest, AThousandJobsOfAThousandFilesStaySmall) {
  testing::ScopedTempDir dir;
  const std::string path = dir.Join("journal");
  {
    std::ofstream out(path, std::ios::binary);
    out << JournalHeader();
    for (int j = 0; j < 1000; ++j) {
      v1::JobInfo info = testing::FakeJob(absl::StrCat("job-", j), 1000, 4, 40, 1);
      info.mutable_spec()->set_files(0, absl::StrCat("/data/set-", j, "/*.tfrecord"));
      for (int f = 0; f < 1000; ++f) {
        v1::FileInfo* file = info.add_files();
        file->set_path(absl::StrFormat("/data/set-%d/part-%05d-of-01000.tfrecord", j, f));
        file->set_num_records(2);
      }
      out << JournalEntry(testing::JobCreated(info).SerializeAsString());
    }
  }
  DispatcherOptions options;
  options.journal_path = path;
  options.journal_sync = false;
  auto impl = DispatcherImpl::Create(options);
  ASSERT_TRUE(impl.ok()) << impl.status();

  const auto start = std::chrono::steady_clock::now();
  auto status = (*impl)->GetStatus({});
  std::string wire;
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(status->SerializeToString(&wire));
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(status->job_summaries_size(), 1000);
  EXPECT_EQ(status->job_summaries(999).num_files(), 1000u);
  EXPECT_LT(wire.size(), 1u << 20);
  std::printf("status of 1000 jobs of 1000 files: %zu bytes in %.1f ms\n", wire.size(), ms);

  v1::StatusRequest whole;
  whole.set_include_job_info(true);
  status = (*impl)->GetStatus(whole);
  ASSERT_TRUE(status.ok());
  EXPECT_GT(status->ByteSizeLong(), 16u << 20);
  std::printf("with every JobInfo (the status before summaries): %zu bytes\n",
              status->ByteSizeLong());
}

}  // namespace
}  // namespace croupier
