// ProducerHeartbeatOrWait: heartbeats held until there is work.
#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "src/dispatcher/test_util.h"

namespace croupier {
namespace {

// One held heartbeat's answer.
struct Held {
  absl::Notification done;
  absl::StatusOr<v1::ProducerHeartbeatResponse> response = absl::UnknownError("not answered");
  absl::Time answered;
};

class DispatcherProducerWaitTest : public testing::DispatcherTest {
 protected:
  void SetUp() override {
    DispatcherTest::SetUp();
    DispatcherOptions options;
    options.heartbeat_interval = absl::Seconds(60);
    Recreate(options);
    // 40 records in batches of 2 for 2 consumers: 20 batches per epoch, tasks of 8 (3 tasks).
    WriteData({25, 15});
    ASSERT_TRUE(Create(Spec("train", 2, 2, /*num_epochs=*/1)).ok());
  }

  uint64_t Register(const std::string& address) {
    auto r = Producer(0, address, /*slots=*/0);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->producer_id() : 0;
  }

  // `gone`: the caller's presence as the gRPC adapter gives it (CallerPresence).
  std::shared_ptr<Held> Beat(uint64_t id, uint32_t slots, absl::Duration wait,
                             CallerPresence::GoneProbe gone = nullptr) {
    auto held = std::make_shared<Held>();
    std::optional<CallerPresence> presence;
    if (gone) presence.emplace(std::move(gone));
    v1::ProducerHeartbeatRequest request;
    request.set_producer_id(id);
    request.set_free_task_slots(slots);
    request.set_wait_for_work_ms(static_cast<uint32_t>(absl::ToInt64Milliseconds(wait)));
    // Shared with the callback: the dispatcher may answer after the test's body ended.
    impl_->ProducerHeartbeatOrWait(request, [raw = held](auto response) {
      raw->response = std::move(response);
      raw->answered = absl::Now();
      raw->done.Notify();
    });
    return held;
  }
};

TEST_F(DispatcherProducerWaitTest, AHeldHeartbeatGetsTasksAsSoonAsAConsumerMakesTheJobActive) {
  const uint64_t id = Register("h:1");
  auto held = Beat(id, 2, absl::Seconds(60));
  // The job has no consumer yet, so no task: the answer is held.
  EXPECT_FALSE(held->done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  const absl::Time registered = absl::Now();
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  ASSERT_TRUE(held->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(held->response.ok()) << held->response.status();
  EXPECT_EQ(held->response->new_tasks_size(), 2);
  EXPECT_EQ(held->response->jobs_size(), 1);  // the job's info comes with its first task
  EXPECT_TRUE(held->response->waits_for_work());
  EXPECT_LT(held->answered - registered, absl::Seconds(5));
}

// A producer killed while its heartbeat is held for work: its call is cancelled (the connection
// closed), so the work that comes goes to a producer that can make it, not to one whose answer
// is lost and whose tasks would wait for its timeout.
TEST_F(DispatcherProducerWaitTest, AHeldHeartbeatWhoseCallerHasGoneIsGivenNoTask) {
  const uint64_t dead = Register("h:1");
  const uint64_t live = Register("h:2");
  auto gone = std::make_shared<std::atomic<bool>>(false);
  auto killed = Beat(dead, 2, absl::Seconds(60), [gone] { return gone->load(); });
  auto waiting = Beat(live, 2, absl::Seconds(60));
  EXPECT_FALSE(killed->done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  gone->store(true);
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  ASSERT_TRUE(killed->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(killed->response.ok()) << killed->response.status();
  EXPECT_EQ(killed->response->new_tasks_size(), 0);
  ASSERT_TRUE(waiting->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(waiting->response.ok()) << waiting->response.status();
  EXPECT_EQ(waiting->response->new_tasks_size(), 2);
  // The dispatcher holds no task of the producer that is gone.
  const v1::StatusResponse status = *impl_->GetStatus({});
  for (const v1::ProducerStatus& p : status.producers()) {
    EXPECT_EQ(p.tasks_size(), p.producer_id() == live ? 2 : 0) << p.ShortDebugString();
  }
}

// The job's only consumer leaves while the producer's heartbeat is held: its tasks are revoked
// and wait as orphans, and a consumer coming back has those batches assigned again under new
// ids. The held answer must revoke the old tasks, so that the producer drops them before it is
// given the new ones. Left for its next heartbeat, the revocation came after the new tasks,
// which the producer refused as overlapping the ones it still held (seen in test_faults.py on a
// slow machine).
TEST_F(DispatcherProducerWaitTest, AHeldAnswerRevokesWhatWasRevokedWhileItWaited) {
  const uint64_t id = Register("h:1");
  auto consumer = Consumer(0, "train", 0, 2);
  ASSERT_TRUE(consumer.ok()) << consumer.status();
  auto first = Producer(id, "h:1", /*slots=*/3);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_EQ(first->new_tasks_size(), 3);
  auto held = Beat(id, 2, absl::Seconds(60));  // every task is assigned: held
  EXPECT_FALSE(held->done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  v1::ConsumerHeartbeatRequest leave;
  leave.set_consumer_id(consumer->consumer_id());
  leave.set_job("train");
  leave.set_rank(0);
  leave.set_world(2);
  leave.set_lease(Lease(consumer->consumer_id()));
  leave.set_leaving(true);
  ASSERT_TRUE(impl_->ConsumerHeartbeat(leave).ok());
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  ASSERT_TRUE(held->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(held->response.ok()) << held->response.status();
  std::set<uint64_t> old_ids;
  for (const v1::Task& t : first->new_tasks()) old_ids.insert(t.task_id());
  // Woken by the job going idle (its orphans), the heartbeat is answered at once with the
  // revocations alone; woken by the registration, with the new tasks too. Either way the old
  // tasks are revoked in that answer, never after the new ones are given.
  const std::set<uint64_t> revoked(held->response->revoked_tasks().begin(),
                                   held->response->revoked_tasks().end());
  EXPECT_EQ(revoked, old_ids);
  v1::ProducerHeartbeatResponse given = *held->response;
  if (given.new_tasks_size() == 0) {
    auto next = Producer(id, "h:1", /*slots=*/2);
    ASSERT_TRUE(next.ok()) << next.status();
    EXPECT_EQ(next->revoked_tasks_size(), 0);
    given = *next;
  }
  ASSERT_EQ(given.new_tasks_size(), 2);
  for (const v1::Task& t : given.new_tasks()) {
    EXPECT_FALSE(old_ids.contains(t.task_id())) << t.ShortDebugString();
  }
}

TEST_F(DispatcherProducerWaitTest, WithoutWorkTheAnswerComesWhenTheWaitEnds) {
  const uint64_t id = Register("h:1");
  const absl::Time start = absl::Now();
  auto held = Beat(id, 2, absl::Milliseconds(200));
  ASSERT_TRUE(held->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(held->response.ok()) << held->response.status();
  EXPECT_EQ(held->response->new_tasks_size(), 0);
  EXPECT_TRUE(held->response->waits_for_work());
  EXPECT_GE(held->answered - start, absl::Milliseconds(190));
}

TEST_F(DispatcherProducerWaitTest, TheWaitIsAtMostTheHeartbeatInterval) {
  DispatcherOptions options;
  options.heartbeat_interval = absl::Milliseconds(200);
  Recreate(options);
  const uint64_t id = Register("h:1");
  const absl::Time start = absl::Now();
  auto held = Beat(id, 2, absl::Seconds(60));
  ASSERT_TRUE(held->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(held->answered - start, absl::Seconds(5));
}

TEST_F(DispatcherProducerWaitTest, NoWaitWithoutAFreeSlotOrWhenNotAsked) {
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  const uint64_t id = Register("h:1");
  auto full = Beat(id, 0, absl::Seconds(60));
  ASSERT_TRUE(full->done.HasBeenNotified());  // answered on this thread
  ASSERT_TRUE(full->response.ok());
  EXPECT_EQ(full->response->new_tasks_size(), 0);
  EXPECT_TRUE(full->response->waits_for_work());
  auto now = Beat(id, 1, absl::ZeroDuration());
  ASSERT_TRUE(now->done.HasBeenNotified());
  ASSERT_TRUE(now->response.ok());
  EXPECT_EQ(now->response->new_tasks_size(), 1);
  EXPECT_FALSE(now->response->waits_for_work());
}

TEST_F(DispatcherProducerWaitTest, AnOrphanWakesAHeldProducer) {
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());
  const uint64_t a = Register("h:1");
  auto took = Producer(a, "h:1", 64);  // every task of the single epoch
  ASSERT_TRUE(took.ok());
  ASSERT_EQ(took->new_tasks_size(), 3);
  const uint64_t b = Register("h:2");
  auto held = Beat(b, 1, absl::Seconds(60));
  EXPECT_FALSE(held->done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  // Producer a goes silent past the timeout; b keeps beating (its held call counts).
  clock_->Advance(absl::Seconds(11));
  ASSERT_TRUE(Producer(b, "h:2", 0).ok());
  impl_->Tick();
  ASSERT_TRUE(held->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(held->response.ok()) << held->response.status();
  ASSERT_EQ(held->response->new_tasks_size(), 1);
  // The orphan with the lowest first batch, under a new task id.
  EXPECT_EQ(held->response->new_tasks(0).first_batch(), took->new_tasks(0).first_batch());
  EXPECT_EQ(held->response->new_tasks(0).num_batches(), took->new_tasks(0).num_batches());
}

TEST_F(DispatcherProducerWaitTest, AProducerThatFindsTheWorkTakenWaitsOnUntilItsDeadline) {
  const uint64_t a = Register("h:1");
  const uint64_t b = Register("h:2");
  const absl::Time start = absl::Now();
  auto held_a = Beat(a, 64, absl::Milliseconds(400));
  auto held_b = Beat(b, 64, absl::Milliseconds(400));
  ASSERT_TRUE(Consumer(0, "train", 1, 2).ok());  // 3 tasks for whoever is woken first
  ASSERT_TRUE(held_a->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(held_b->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  ASSERT_TRUE(held_a->response.ok());
  ASSERT_TRUE(held_b->response.ok());
  EXPECT_EQ(held_a->response->new_tasks_size() + held_b->response->new_tasks_size(), 3);
  Held& empty = held_a->response->new_tasks_size() == 0 ? *held_a : *held_b;
  Held& full = held_a->response->new_tasks_size() == 0 ? *held_b : *held_a;
  EXPECT_EQ(full.response->new_tasks_size(), 3);
  EXPECT_LT(full.answered - start, absl::Milliseconds(390));
  EXPECT_GE(empty.answered - start, absl::Milliseconds(390));
}

// A stream job's source producer waits at the dispatcher for work it is never given (a stream
// job has no tasks). Its job deleted, it is removed with it: the held heartbeat is answered at
// once, with the removal, so that it learns its job has ended now, not a heartbeat interval later
// (the wait here is a minute).
TEST_F(DispatcherProducerWaitTest, ASourceProducerHeldForWorkLearnsAtOnceThatItsJobWasDeleted) {
  v1::JobSpec stream;
  stream.set_name("py");
  stream.set_source(v1::SOURCE_KIND_PYTHON);
  stream.set_features("x:int64");
  stream.set_batch_size(1);
  stream.set_num_consumers(1);
  stream.set_source_batches_per_epoch(10);
  ASSERT_TRUE(Create(stream).ok());
  v1::ProducerHeartbeatRequest registration;
  registration.set_data_address("py:1");
  registration.set_source_job("py");
  auto registered = impl_->ProducerHeartbeat(registration);
  ASSERT_TRUE(registered.ok()) << registered.status();
  auto held = Beat(registered->producer_id(), 2, absl::Seconds(60));
  EXPECT_FALSE(held->done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  v1::DeleteJobRequest deletion;
  deletion.set_name("py");
  const absl::Time deleted = absl::Now();
  ASSERT_TRUE(impl_->DeleteJob(deletion).ok());
  ASSERT_TRUE(held->done.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_LT(held->answered - deleted, absl::Seconds(5));
  EXPECT_TRUE(absl::IsNotFound(held->response.status())) << held->response.status();
  EXPECT_EQ(held->response.status().message(),
            absl::StrCat("producer ", registered->producer_id(),
                         " is unknown (job 'py' deleted); register again"));
}

TEST_F(DispatcherProducerWaitTest, StopWaitingAnswersHeldHeartbeatsAndLaterOnesAtOnce) {
  const uint64_t id = Register("h:1");
  auto held = Beat(id, 2, absl::Seconds(60));
  EXPECT_FALSE(held->done.HasBeenNotified());
  impl_->StopWaiting();
  EXPECT_TRUE(held->done.HasBeenNotified());
  ASSERT_TRUE(held->response.ok());
  EXPECT_EQ(held->response->new_tasks_size(), 0);
  auto later = Beat(id, 2, absl::Seconds(60));
  EXPECT_TRUE(later->done.HasBeenNotified());
}

TEST_F(DispatcherProducerWaitTest, ErrorsAreAnsweredAtOnce) {
  auto held = Beat(/*id=*/99, 2, absl::Seconds(60));
  ASSERT_TRUE(held->done.HasBeenNotified());
  EXPECT_TRUE(absl::IsNotFound(held->response.status())) << held->response.status();
}

}  // namespace
}  // namespace croupier
