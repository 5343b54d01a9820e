// The MPI world (runtime/mpi/world.h). Run alone it is a 1-rank world (the unit test); under
// mpirun (tests/cluster.cmake: -np 2 and -np 4) every rank runs the same tests in the same
// order, so each collective below is entered by every rank. In a build without MPI every test
// checks World::Get's Unimplemented and skips.
#include <cstdint>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/mpi/world.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu::mpi {
namespace {

using ::testing::AllOf;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

// Long enough for a loaded 2-core machine running 4 ranks; short enough that a rank that
// went astray fails the job in reasonable time.
constexpr absl::Duration kT = absl::Seconds(30);

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

class WorldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<World*> world = World::Get();
#ifdef VGPU_HAVE_MPI  // set by tests/cluster.cmake from what CMake found
    ASSERT_EQ(Available(), VGPU_HAVE_MPI == 1);
#endif
    if (!Available()) {
      EXPECT_THAT(world, StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("libopenmpi-dev")));
      absl::StatusOr<LaunchInfo> launch = DetectLaunch();
      if (launch.ok() && launch->under_launcher) {
        // Run by mpirun against a build without MPI: the error says so.
        EXPECT_THAT(world.status().message(),
                    HasSubstr(absl::StrCat("MPI launcher as rank ", launch->rank)));
      }
      GTEST_SKIP() << world.status().message();
    }
    ASSERT_THAT(world, IsOk());
    w_ = *world;
    rank_ = w_->rank();
    size_ = w_->size();
  }

  World* w_ = nullptr;
  int rank_ = 0;
  int size_ = 1;
};

TEST_F(WorldTest, RanksAgreeWithTheLauncher) {
  EXPECT_GE(rank_, 0);
  EXPECT_LT(rank_, size_);
  EXPECT_GE(w_->local_rank(), 0);
  EXPECT_LT(w_->local_rank(), w_->local_size());
  EXPECT_LE(w_->local_size(), size_);
  absl::StatusOr<LaunchInfo> launch = DetectLaunch();
  ASSERT_THAT(launch, IsOk());
  if (launch->under_launcher) {
    EXPECT_EQ(launch->rank, rank_);
    EXPECT_EQ(launch->size, size_);
    EXPECT_EQ(launch->local_rank, w_->local_rank());
    EXPECT_EQ(launch->local_size, w_->local_size());
  } else {
    EXPECT_EQ(size_, 1);
  }
  EXPECT_THAT(w_->Barrier(kT), IsOk());
  // The same world every time.
  EXPECT_THAT(World::Get(), IsOkAndHolds(w_));
}

// Values whose float sum depends on the order: with 3 ranks, (1 + 1e8) - 1e8 is 0 but
// (-1e8 + 1e8) + 1 is 1.
float Value(int rank, size_t i) {
  static constexpr float kBase[] = {1.0f, 1e8f, -1e8f, 0.5f};
  return kBase[rank % 4] * static_cast<float>(1 + i % 5) + static_cast<float>(i % 3) * 0.25f;
}

std::vector<float> InRankOrder(int size, size_t count, bool mean) {
  std::vector<float> sum(count);
  for (size_t i = 0; i < count; ++i) {
    float acc = Value(0, i);
    for (int r = 1; r < size; ++r) acc += Value(r, i);
    sum[i] = mean ? acc / static_cast<float>(size) : acc;
  }
  return sum;
}

// Every rank holds the same bits: gathered and compared block by block.
void ExpectSameOnEveryRank(World* w, const std::vector<float>& mine) {
  const size_t bytes = mine.size() * sizeof(float);
  std::vector<float> all(mine.size() * w->size());
  ASSERT_THAT(w->AllGather(mine.data(), bytes, all.data(), kT), IsOk());
  for (int r = 0; r < w->size(); ++r) {
    EXPECT_EQ(std::memcmp(all.data() + r * mine.size(), mine.data(), bytes), 0)
        << "rank " << r << " holds other bits than rank " << w->rank();
  }
}

TEST_F(WorldTest, AllReduceSumsInRankOrderSoEveryRankHasTheSameBits) {
  const size_t count = 1003;
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = Value(rank_, i);
  ASSERT_THAT(w_->AllReduce(data.data(), count, ReduceOp::kSum, kT), IsOk());
  std::vector<float> expected = InRankOrder(size_, count, false);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(Bits(data[i]), Bits(expected[i]))
        << "element " << i << ": " << data[i] << " vs " << expected[i];
  }
  if (size_ >= 3) {
    // The values do tell the orders apart: summed from the last rank down, element 0 differs.
    float reverse = Value(size_ - 1, 0);
    for (int r = size_ - 2; r >= 0; --r) reverse += Value(r, 0);
    EXPECT_NE(Bits(reverse), Bits(expected[0]));
  }
  ExpectSameOnEveryRank(w_, data);
}

TEST_F(WorldTest, AllReduceMeanDividesTheRankOrderSum) {
  const size_t count = 257;
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = Value(rank_, i);
  ASSERT_THAT(w_->AllReduce(data.data(), count, ReduceOp::kMean, kT), IsOk());
  std::vector<float> expected = InRankOrder(size_, count, true);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(Bits(data[i]), Bits(expected[i])) << i;
  ExpectSameOnEveryRank(w_, data);
}

TEST_F(WorldTest, AllReduceOfSeveralChunks) {
  // Over 8 MiB: three 4 MiB chunks, the last one partial.
  const size_t count = (size_t{8} << 20) / sizeof(float) + 1234;
  std::vector<float> data(count);
  for (size_t i = 0; i < count; ++i) data[i] = static_cast<float>((rank_ + 1) * (i % 7));
  ASSERT_THAT(w_->AllReduce(data.data(), count, ReduceOp::kSum, kT), IsOk());
  const float ranks = static_cast<float>(size_ * (size_ + 1) / 2);
  for (size_t i = 0; i < count; ++i) {
    ASSERT_EQ(data[i], ranks * static_cast<float>(i % 7)) << "element " << i;
  }
}

TEST_F(WorldTest, AllReduceOfNothing) {
  EXPECT_THAT(w_->AllReduce(nullptr, 0, ReduceOp::kSum, kT), IsOk());
}

TEST_F(WorldTest, BroadcastFromEveryRoot) {
  for (int root = 0; root < size_; ++root) {
    SCOPED_TRACE(absl::StrCat("root ", root));
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{37}, (size_t{5} << 20) + 3}) {
      std::vector<unsigned char> data(bytes, 0);
      if (rank_ == root) {
        for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<unsigned char>(i * 7 + root);
      }
      ASSERT_THAT(w_->Broadcast(data.data(), bytes, root, kT), IsOk());
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(data[i], static_cast<unsigned char>(i * 7 + root)) << "byte " << i;
      }
    }
  }
}

TEST_F(WorldTest, AllGatherPutsBlockRFromRankR) {
  for (size_t bytes : {size_t{0}, size_t{13}, (size_t{4} << 20) + 5}) {
    SCOPED_TRACE(bytes);
    std::vector<unsigned char> mine(bytes);
    for (size_t i = 0; i < bytes; ++i) mine[i] = static_cast<unsigned char>(rank_ * 31 + i);
    std::vector<unsigned char> all(bytes * size_, 0xee);
    ASSERT_THAT(w_->AllGather(mine.data(), bytes, all.data(), kT), IsOk());
    for (int r = 0; r < size_; ++r) {
      for (size_t i = 0; i < bytes; ++i) {
        ASSERT_EQ(all[r * bytes + i], static_cast<unsigned char>(r * 31 + i))
            << "block " << r << " byte " << i;
      }
    }
  }
}

TEST_F(WorldTest, SendRecvMatchesTags) {
  // A ring: two messages to the next rank, received in the other order by tag.
  const int next = (rank_ + 1) % size_;
  const int prev = (rank_ + size_ - 1) % size_;
  int seven = 700 + rank_;
  int three = 300 + rank_;
  ASSERT_THAT(w_->Send(&seven, sizeof(seven), next, 7, kT), IsOk());
  ASSERT_THAT(w_->Send(&three, sizeof(three), next, 3, kT), IsOk());
  int got = 0;
  EXPECT_THAT(w_->Recv(&got, sizeof(got), prev, 3, kT), IsOkAndHolds(prev));
  EXPECT_EQ(got, 300 + prev);
  EXPECT_THAT(w_->Recv(&got, sizeof(got), prev, 7, kT), IsOkAndHolds(prev));
  EXPECT_EQ(got, 700 + prev);
  // A larger message (beyond MPI's eager limit), and an empty one.
  std::vector<double> big(300000), back(300000);
  std::iota(big.begin(), big.end(), rank_ * 1e6);
  if (size_ == 1) {
    ASSERT_THAT(w_->Send(big.data(), 0, 0, 5, kT), IsOk());
    EXPECT_THAT(w_->Recv(back.data(), 0, 0, 5, kT), IsOkAndHolds(0));
  } else if (rank_ == 0) {
    ASSERT_THAT(w_->Send(big.data(), big.size() * sizeof(double), 1, 5, kT), IsOk());
    ASSERT_THAT(w_->Send(nullptr, 0, 1, 6, kT), IsOk());
  } else if (rank_ == 1) {
    // In the order sent: a Send returns once its message is received (or the deadline).
    EXPECT_THAT(w_->Recv(back.data(), back.size() * sizeof(double), 0, 5, kT), IsOkAndHolds(0));
    EXPECT_THAT(w_->Recv(nullptr, 0, 0, 6, kT), IsOkAndHolds(0));
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], 0.0 + static_cast<double>(i));
  }
  EXPECT_THAT(w_->Barrier(kT), IsOk());
}

TEST_F(WorldTest, RecvFromAnySourceReturnsTheSender) {
  const int kTag = 11;
  if (size_ == 1) {
    int me = 42;
    ASSERT_THAT(w_->Send(&me, sizeof(me), 0, kTag, kT), IsOk());
    int got = 0;
    EXPECT_THAT(w_->Recv(&got, sizeof(got), World::kAnySource, kTag, kT), IsOkAndHolds(0));
    EXPECT_EQ(got, 42);
    return;
  }
  if (rank_ == 0) {
    std::set<int> senders;
    for (int i = 1; i < size_; ++i) {
      int payload = -1;
      absl::StatusOr<int> from = w_->Recv(&payload, sizeof(payload), World::kAnySource, kTag, kT);
      ASSERT_THAT(from, IsOk());
      EXPECT_EQ(*from, payload);
      senders.insert(*from);
    }
    EXPECT_EQ(static_cast<int>(senders.size()), size_ - 1);
    EXPECT_EQ(*senders.begin(), 1);
  } else {
    ASSERT_THAT(w_->Send(&rank_, sizeof(rank_), 0, kTag, kT), IsOk());
  }
  EXPECT_THAT(w_->Barrier(kT), IsOk());
}

TEST_F(WorldTest, RecvOfTheWrongSizeNamesTheSenderAndDropsTheMessage) {
  const int kTag = 21;
  const int from = size_ == 1 ? 0 : 1;
  if (rank_ == from) {
    char twelve[12] = "twelve byte";
    double eight = 8.5;
    ASSERT_THAT(w_->Send(twelve, sizeof(twelve), 0, kTag, kT), IsOk());
    ASSERT_THAT(w_->Send(&eight, sizeof(eight), 0, kTag, kT), IsOk());
  }
  if (rank_ == 0) {
    double got = 0;
    EXPECT_THAT(w_->Recv(&got, sizeof(got), from, kTag, kT),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(absl::StrCat("rank ", from, " sent 12 bytes")),
                               HasSubstr("exactly 8"))));
    // The bad message is gone: the next one is there.
    EXPECT_THAT(w_->Recv(&got, sizeof(got), World::kAnySource, kTag, kT), IsOkAndHolds(from));
    EXPECT_EQ(got, 8.5);
  }
  EXPECT_THAT(w_->Barrier(kT), IsOk());
}

TEST_F(WorldTest, BadArgumentsAreRefused) {
  int x = 0;
  EXPECT_THAT(w_->Broadcast(&x, sizeof(x), size_, kT),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root rank")));
  EXPECT_THAT(w_->Broadcast(&x, sizeof(x), -1, kT),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("root rank -1")));
  EXPECT_THAT(w_->Barrier(absl::Seconds(-1)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative timeout")));
  EXPECT_THAT(w_->Send(&x, sizeof(x), size_, 0, kT),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr(absl::StrCat("destination rank ", size_))));
  EXPECT_THAT(w_->Send(&x, sizeof(x), 0, -1, kT),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tag -1")));
  EXPECT_THAT(w_->Recv(&x, sizeof(x), -5, 0, kT),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("source rank -5")));
  EXPECT_THAT(w_->Recv(&x, sizeof(x), 0, -2, kT),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tag -2")));
  // The refused collectives kept every rank in step: this one still meets.
  EXPECT_THAT(w_->Barrier(kT), IsOk());
}

TEST_F(WorldTest, RecvTimesOutNamingTheRank) {
  const int from = (rank_ + 1) % size_;
  int x = 0;
  absl::Time start = absl::Now();
  EXPECT_THAT(w_->Recv(&x, sizeof(x), from, 99, absl::Milliseconds(300)),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       AllOf(HasSubstr(absl::StrCat("on rank ", rank_)),
                             HasSubstr(absl::StrCat("waiting for rank(s) ", from)))));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(300));
  EXPECT_THAT(w_->Recv(&x, sizeof(x), World::kAnySource, 99, absl::Milliseconds(100)),
              StatusIs(absl::StatusCode::kDeadlineExceeded, HasSubstr("any rank")));
  EXPECT_THAT(w_->Barrier(kT), IsOk());
}

// The last rank comes late to a collective: the others give up after 1 s with an error that
// names it (rank 0, which waits for every rank) or rank 0 (the others, which wait for the
// result); the late rank's own attempt then times out too, and the next collective works.
TEST_F(WorldTest, ALateRankIsADeadlineNotAHang) {
  if (size_ < 2) return;  // needs 2 ranks: mpi_world_test_np2 and _np4 run it
  const int last = size_ - 1;
  if (rank_ == last) absl::SleepFor(absl::Seconds(3));
  absl::Time start = absl::Now();
  absl::Status late = w_->Barrier(absl::Seconds(1));
  EXPECT_THAT(late, StatusIs(absl::StatusCode::kDeadlineExceeded,
                             AllOf(HasSubstr("Barrier"), HasSubstr(absl::StrCat("on rank ", rank_)),
                                   HasSubstr("timed out after 1s"))));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  if (rank_ == 0) {
    // The missing ranks, sorted: the late one last (a loaded machine may add another).
    EXPECT_THAT(std::string(late.message()),
                AllOf(HasSubstr("waiting for rank(s) "), EndsWith(absl::StrCat(" ", last))));
  } else {
    EXPECT_THAT(std::string(late.message()), HasSubstr("waiting for rank(s) 0"));
  }
  // Back in step: the late rank's stale message must not satisfy this barrier for rank 0.
  ASSERT_THAT(w_->Barrier(kT), IsOk());

  // The same with an AllReduce, whose messages carry data.
  std::vector<float> data(100, static_cast<float>(rank_ + 1));
  if (rank_ == last) absl::SleepFor(absl::Seconds(2));
  EXPECT_THAT(
      w_->AllReduce(data.data(), data.size(), ReduceOp::kSum, absl::Seconds(1)),
      StatusIs(absl::StatusCode::kDeadlineExceeded,
               AllOf(HasSubstr("AllReduce"), rank_ == 0 ? EndsWith(absl::StrCat(" ", last))
                                                        : EndsWith("waiting for rank(s) 0"))));
  ASSERT_THAT(w_->Barrier(kT), IsOk());
  std::vector<float> again(100, static_cast<float>(rank_ + 1));
  ASSERT_THAT(w_->AllReduce(again.data(), again.size(), ReduceOp::kSum, kT), IsOk());
  for (float v : again) ASSERT_EQ(v, static_cast<float>(size_ * (size_ + 1) / 2));
}

}  // namespace
}  // namespace vgpu::mpi
