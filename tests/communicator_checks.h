// The conformance checks every communicator kind passes (collectives/communicator.h), shared by
// the one-process test (communicator_test.cc) and the multi-process one run under mpirun
// (communicator_mpi_test.cc). Global rank g's input is a pure function of (g, i), so every
// process computes the whole job's reference without communicating; the values are multiples
// of 1/4 below 2^10, so sums in any order are exact and results are compared exactly.
//
// Thread safety: call from one thread.
#ifndef VGPU_TESTS_COMMUNICATOR_CHECKS_H_
#define VGPU_TESTS_COMMUNICATOR_CHECKS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/runtime/status_matchers.h"
#include "vgpu/strategies/collectives/communicator.h"
#include "vgpu/strategies/tensor.h"

namespace vgpu::testing {

inline float CommValue(int rank, uint64_t i, int salt) {
  return static_cast<float>(static_cast<int>((rank * 7 + i * 13 + salt * 31) % 97) - 48) * 0.25f;
}

// One device buffer of `count` floats per local rank.
struct RankTensors {
  std::vector<strategies::Tensor> t;
  std::vector<float*> ptr;
};

inline RankTensors MakeTensors(const std::vector<LogicalDevice*>& devices, uint64_t count,
                               int first_rank, int salt) {
  RankTensors r;
  for (size_t i = 0; i < devices.size(); ++i) {
    std::vector<float> host(count);
    for (uint64_t k = 0; k < count; ++k) host[k] = CommValue(first_rank + i, k, salt);
    auto t = strategies::Tensor::FromHost(devices[i], {static_cast<int64_t>(count)}, host);
    EXPECT_THAT(t.status(), IsOk());
    r.ptr.push_back(t->data());
    r.t.push_back(*std::move(t));
  }
  return r;
}

inline std::vector<float> Read(strategies::Tensor& t) {
  auto h = t.ToHost();
  EXPECT_THAT(h.status(), IsOk());
  return h.ok() ? *h : std::vector<float>();
}

// Runs every primitive (sum and mean, out of place and in place, every root) on `comm` over
// `devices` (this process's ranks) and checks each local result against the reference.
inline void CheckAllPrimitives(collectives::Communicator& comm,
                               const std::vector<LogicalDevice*>& devices, uint64_t count) {
  using collectives::RankBuffer;
  using collectives::ReduceOp;
  const int n = comm.size();
  const int first = comm.first_rank();
  const int local = comm.local_size();
  ASSERT_EQ(local, static_cast<int>(devices.size()));
  auto buffers = [&](RankTensors& send, RankTensors& recv) {
    std::vector<RankBuffer> b;
    for (int i = 0; i < local; ++i) b.push_back({devices[i]->stream(), send.ptr[i], recv.ptr[i]});
    return b;
  };
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    const double scale = op == ReduceOp::kMean ? 1.0 / n : 1.0;
    SCOPED_TRACE(op == ReduceOp::kSum ? "sum" : "mean");
    // AllReduce, out of place, then in place.
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(in_place ? "in place" : "out of place");
      RankTensors send = MakeTensors(devices, count, first, 1);
      RankTensors recv = in_place ? RankTensors() : MakeTensors(devices, count, first, 2);
      std::vector<RankBuffer> b = buffers(send, in_place ? send : recv);
      ASSERT_THAT(comm.AllReduce(b, count, op), IsOk());
      for (int i = 0; i < local; ++i) {
        std::vector<float> got = Read(in_place ? send.t[i] : recv.t[i]);
        for (uint64_t k = 0; k < count; ++k) {
          double want = 0;
          for (int g = 0; g < n; ++g) want += CommValue(g, k, 1);
          ASSERT_FLOAT_EQ(got[k], static_cast<float>(want * scale))
              << "AllReduce rank " << first + i << " element " << k;
        }
      }
    }
    // ReduceScatter: send holds n blocks.
    {
      RankTensors send = MakeTensors(devices, count * n, first, 3);
      RankTensors recv = MakeTensors(devices, count, first, 4);
      ASSERT_THAT(comm.ReduceScatter(buffers(send, recv), count, op), IsOk());
      for (int i = 0; i < local; ++i) {
        std::vector<float> got = Read(recv.t[i]);
        for (uint64_t k = 0; k < count; ++k) {
          double want = 0;
          for (int g = 0; g < n; ++g) want += CommValue(g, (first + i) * count + k, 3);
          ASSERT_FLOAT_EQ(got[k], static_cast<float>(want * scale))
              << "ReduceScatter rank " << first + i << " element " << k;
        }
      }
    }
    // Reduce to every root in turn; the other ranks' recv is untouched.
    for (int root = 0; root < n; ++root) {
      RankTensors send = MakeTensors(devices, count, first, 5);
      RankTensors recv = MakeTensors(devices, count, first, 6);
      ASSERT_THAT(comm.Reduce(buffers(send, recv), count, op, root), IsOk());
      for (int i = 0; i < local; ++i) {
        std::vector<float> got = Read(recv.t[i]);
        for (uint64_t k = 0; k < count; ++k) {
          double want = CommValue(first + i, k, 6);
          if (first + i == root) {
            want = 0;
            for (int g = 0; g < n; ++g) want += CommValue(g, k, 5);
            want *= scale;
          }
          ASSERT_FLOAT_EQ(got[k], static_cast<float>(want))
              << "Reduce root " << root << " rank " << first + i << " element " << k;
        }
      }
    }
  }
  // AllGather: block g from rank g.
  {
    RankTensors send = MakeTensors(devices, count, first, 7);
    RankTensors recv = MakeTensors(devices, count * n, first, 8);
    ASSERT_THAT(comm.AllGather(buffers(send, recv), count), IsOk());
    for (int i = 0; i < local; ++i) {
      std::vector<float> got = Read(recv.t[i]);
      for (int g = 0; g < n; ++g) {
        for (uint64_t k = 0; k < count; ++k) {
          ASSERT_EQ(got[g * count + k], CommValue(g, k, 7))
              << "AllGather rank " << first + i << " block " << g << " element " << k;
        }
      }
    }
  }
  // Broadcast from every root, in place.
  for (int root = 0; root < n; ++root) {
    RankTensors data = MakeTensors(devices, count, first, 9 + root);
    ASSERT_THAT(comm.Broadcast(buffers(data, data), count, root), IsOk());
    for (int i = 0; i < local; ++i) {
      std::vector<float> got = Read(data.t[i]);
      for (uint64_t k = 0; k < count; ++k) {
        ASSERT_EQ(got[k], CommValue(root, k, 9 + root))
            << "Broadcast root " << root << " rank " << first + i << " element " << k;
      }
    }
  }
}

}  // namespace vgpu::testing

#endif  // VGPU_TESTS_COMMUNICATOR_CHECKS_H_
