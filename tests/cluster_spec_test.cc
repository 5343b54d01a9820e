// ClusterSpec (devices/cluster.h): the rank-to-task mapping without and with TF_CONFIG, the
// lookups, and every refusal with its code and a fragment of its message.
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vgpu/devices/cluster.h"
#include "vgpu/runtime/status_matchers.h"

namespace vgpu {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::vgpu::testing::IsOk;
using ::vgpu::testing::IsOkAndHolds;
using ::vgpu::testing::StatusIs;

mpi::LaunchInfo Launch(int rank, int size) {
  mpi::LaunchInfo l;
  l.under_launcher = size > 1;
  l.rank = rank;
  l.size = size;
  return l;
}

ClusterSpec MustCreate(int rank, int size, std::optional<std::string> tf_config, int ps_tasks = 0) {
  absl::StatusOr<ClusterSpec> c = ClusterSpec::Create(Launch(rank, size), tf_config, ps_tasks);
  EXPECT_THAT(c, IsOk());
  return c.ok() ? *std::move(c) : ClusterSpec::Local();
}

std::vector<std::string> TaskNames(const ClusterSpec& c) {
  std::vector<std::string> out;
  for (int r = 0; r < c.size(); ++r) out.push_back(c.task(r).ToString());
  return out;
}

auto Invalid(const std::string& fragment) {
  return StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr(fragment));
}

absl::Status CreateStatus(int rank, int size, const std::string& tf_config, int ps_tasks = 0) {
  return ClusterSpec::Create(Launch(rank, size), tf_config, ps_tasks).status();
}

constexpr char kFull[] = R"({"cluster": {"worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"],
  "chief": ["c0:2222"], "evaluator": ["e0:2222"]}})";

TEST(TaskId, ToStringAndEquality) {
  EXPECT_EQ((TaskId{"worker", 1}).ToString(), "/job:worker/task:1");
  EXPECT_EQ((TaskId{"ps", 0}), (TaskId{"ps", 0}));
  EXPECT_NE((TaskId{"ps", 0}), (TaskId{"ps", 1}));
  EXPECT_NE((TaskId{"ps", 0}), (TaskId{"worker", 0}));
}

TEST(ClusterSpec, LocalIsOneLocalhostTask) {
  ClusterSpec c = ClusterSpec::Local();
  EXPECT_TRUE(c.is_local_only());
  EXPECT_EQ(c.size(), 1);
  EXPECT_EQ(c.rank(), 0);
  EXPECT_EQ(c.self(), (TaskId{"localhost", 0}));
  EXPECT_EQ(c.self().ToString(), "/job:localhost/task:0");
  EXPECT_THAT(c.RanksOf("localhost"), ElementsAre(0));
  EXPECT_EQ(c.Describe(), "rank 0: /job:localhost/task:0 (this process)\n");
}

TEST(ClusterSpec, WithoutTfConfigRanksAreWorkersThenPs) {
  ClusterSpec one = MustCreate(0, 1, std::nullopt);
  EXPECT_FALSE(one.is_local_only());
  EXPECT_EQ(one.self(), (TaskId{"worker", 0}));  // Create never gives localhost

  ClusterSpec four = MustCreate(2, 4, std::nullopt);
  EXPECT_THAT(TaskNames(four), ElementsAre("/job:worker/task:0", "/job:worker/task:1",
                                           "/job:worker/task:2", "/job:worker/task:3"));
  EXPECT_EQ(four.self(), (TaskId{"worker", 2}));
  EXPECT_EQ(four.NumTasks("ps"), 0);

  ClusterSpec ps = MustCreate(4, 5, std::nullopt, /*ps_tasks=*/2);
  EXPECT_THAT(TaskNames(ps), ElementsAre("/job:worker/task:0", "/job:worker/task:1",
                                         "/job:worker/task:2", "/job:ps/task:0", "/job:ps/task:1"));
  EXPECT_EQ(ps.self(), (TaskId{"ps", 1}));
  EXPECT_THAT(ps.RanksOf("worker"), ElementsAre(0, 1, 2));
  EXPECT_THAT(ps.RanksOf("ps"), ElementsAre(3, 4));
  EXPECT_THAT(ps.RanksOf("chief"), IsEmpty());
  EXPECT_EQ(ps.NumTasks("worker"), 3);
  EXPECT_EQ(ps.NumTasks("ps"), 2);
  EXPECT_THAT(ps.Jobs(), ElementsAre("worker", "ps"));
  EXPECT_EQ(ps.JobSummary(), "worker (3 tasks), ps (2 tasks)");
  EXPECT_EQ(ps.address(0), "");

  // The most parameter servers: all ranks but one.
  ClusterSpec max_ps = MustCreate(0, 3, std::nullopt, 2);
  EXPECT_THAT(TaskNames(max_ps),
              ElementsAre("/job:worker/task:0", "/job:ps/task:0", "/job:ps/task:1"));
}

TEST(ClusterSpec, TfConfigRanksGoChiefWorkerPsEvaluator) {
  for (int rank = 0; rank < 5; ++rank) {
    ClusterSpec c = MustCreate(rank, 5, kFull);
    EXPECT_THAT(TaskNames(c),
                ElementsAre("/job:chief/task:0", "/job:worker/task:0", "/job:worker/task:1",
                            "/job:ps/task:0", "/job:evaluator/task:0"));
    EXPECT_EQ(c.rank(), rank);
    EXPECT_EQ(c.self(), c.task(rank));
    EXPECT_EQ(c.address(0), "c0:2222");
    EXPECT_EQ(c.address(2), "w1:2222");
    EXPECT_EQ(c.address(4), "e0:2222");
  }
  ClusterSpec c = MustCreate(1, 5, kFull);
  EXPECT_THAT(c.Jobs(), ElementsAre("chief", "worker", "ps", "evaluator"));
  EXPECT_THAT(c.RanksOf("worker"), ElementsAre(1, 2));
  EXPECT_EQ(c.Describe(),
            "rank 0: /job:chief/task:0 c0:2222\n"
            "rank 1: /job:worker/task:0 w0:2222 (this process)\n"
            "rank 2: /job:worker/task:1 w1:2222\n"
            "rank 3: /job:ps/task:0 p0:2222\n"
            "rank 4: /job:evaluator/task:0 e0:2222\n");
}

TEST(ClusterSpec, TfConfigShapes) {
  ClusterSpec workers = MustCreate(0, 1, R"({"cluster": {"worker": ["localhost:1"]}})");
  EXPECT_EQ(workers.self(), (TaskId{"worker", 0}));
  ClusterSpec chief_only = MustCreate(0, 1, R"({"cluster": {"chief": ["a:1"]}})");
  EXPECT_EQ(chief_only.self(), (TaskId{"chief", 0}));
  ClusterSpec ps_first =
      MustCreate(2, 4, R"({"cluster": {"ps": ["p0:1", "p1:1"], "worker": ["w0:1", "w1:1"]}})");
  EXPECT_THAT(TaskNames(ps_first), ElementsAre("/job:worker/task:0", "/job:worker/task:1",
                                               "/job:ps/task:0", "/job:ps/task:1"));
  EXPECT_EQ(ps_first.self(), (TaskId{"ps", 0}));
  // Whitespace, "environment" and "rpc_layer" as TensorFlow writes them are accepted.
  ClusterSpec tf = MustCreate(
      1, 2,
      "\n{ \"cluster\" : {\"worker\":[\"w0:1\",\"w1:1\"]},\n  \"task\": {\"type\": \"worker\", "
      "\"index\": 1}, \"environment\": \"cloud\", \"rpc_layer\": \"grpc\" }\n");
  EXPECT_EQ(tf.self(), (TaskId{"worker", 1}));
  // --ps-tasks that agrees with TF_CONFIG.
  ClusterSpec agree = MustCreate(0, 5, kFull, /*ps_tasks=*/1);
  EXPECT_EQ(agree.NumTasks("ps"), 1);
}

TEST(ClusterSpec, PerProcessTaskIsCheckedAgainstTheRank) {
  const std::string base = R"({"cluster": {"chief": ["c:1"], "worker": ["w0:1", "w1:1"]}, )";
  ClusterSpec c = MustCreate(2, 3, base + R"("task": {"type": "worker", "index": 1}})");
  EXPECT_EQ(c.self(), (TaskId{"worker", 1}));
  EXPECT_THAT(CreateStatus(1, 3, base + R"("task": {"type": "worker", "index": 1}})"),
              AllOf(Invalid("\"task\" is /job:worker/task:1 but this process, rank 1 of 3, is "
                            "/job:worker/task:0"),
                    Invalid("chief, worker, ps, evaluator")));
  EXPECT_THAT(CreateStatus(0, 3, base + R"("task": {"type": "worker", "index": 0}})"),
              Invalid("is /job:chief/task:0"));
}

TEST(ClusterSpec, RankOfRoundTripsAndNamesMissingTasks) {
  ClusterSpec c = MustCreate(0, 5, kFull);
  for (int r = 0; r < c.size(); ++r) EXPECT_THAT(c.RankOf(c.task(r)), IsOkAndHolds(r));
  ClusterSpec ps = MustCreate(0, 4, std::nullopt, 1);
  for (int r = 0; r < ps.size(); ++r) EXPECT_THAT(ps.RankOf(ps.task(r)), IsOkAndHolds(r));
  EXPECT_THAT(
      ps.RankOf(TaskId{"worker", 3}),
      StatusIs(absl::StatusCode::kNotFound, AllOf(HasSubstr("no task /job:worker/task:3"),
                                                  HasSubstr("worker (3 tasks), ps (1 task)"))));
  EXPECT_THAT(ps.RankOf(TaskId{"chief", 0}), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_THAT(ClusterSpec::Local().RankOf(TaskId{"localhost", 0}), IsOkAndHolds(0));
}

TEST(ClusterSpec, BadLaunchAndPsTasks) {
  EXPECT_THAT(ClusterSpec::Create(Launch(3, 3), std::nullopt).status(),
              Invalid("rank 3 of 3 processes is not a valid launch"));
  EXPECT_THAT(ClusterSpec::Create(Launch(0, 0), std::nullopt).status(),
              Invalid("not a valid launch"));
  EXPECT_THAT(ClusterSpec::Create(Launch(0, 4), std::nullopt, -1).status(),
              AllOf(Invalid("--ps-tasks=-1 is negative"), Invalid("up to 3")));
  EXPECT_THAT(ClusterSpec::Create(Launch(0, 4), std::nullopt, 4).status(),
              AllOf(Invalid("--ps-tasks=4 leaves no worker"), Invalid("4 processes"),
                    Invalid("at most 3 of them")));
  EXPECT_THAT(ClusterSpec::Create(Launch(0, 1), std::nullopt, 1).status(),
              Invalid("1 process (mpirun -np) and at most 0"));
  EXPECT_THAT(ClusterSpec::Create(Launch(0, 5), std::string(kFull), -2).status(),
              Invalid("is negative"));
}

TEST(ClusterSpec, TfConfigNotJsonOrNotAnObject) {
  EXPECT_THAT(CreateStatus(0, 1, ""), Invalid("TF_CONFIG: empty; unset TF_CONFIG"));
  EXPECT_THAT(CreateStatus(0, 1, " \n"), Invalid("empty"));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {"worker": ["a:1"],}})"),
              Invalid("TF_CONFIG: invalid JSON at byte 31 (line 1, column 32): expected a string "
                      "key"));
  EXPECT_THAT(CreateStatus(0, 1, "{'cluster': {}}"), Invalid("invalid JSON at byte 1"));
  EXPECT_THAT(CreateStatus(0, 1, "[1, 2]"), Invalid("must be a JSON object"));
  EXPECT_THAT(CreateStatus(0, 1, "\"worker\""), Invalid("not a string"));
  EXPECT_THAT(CreateStatus(0, 1, std::string(kMaxTfConfigBytes + 1, ' ')),
              Invalid("1048577 bytes, over the limit of 1048576 bytes (1 MiB)"));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {"worker": ["a:1"]}, "taks": {}})"),
              AllOf(Invalid("unknown key \"taks\""), Invalid("\"cluster\", \"task\"")));
}

TEST(ClusterSpec, TfConfigBadCluster) {
  EXPECT_THAT(CreateStatus(0, 1, R"({"task": {"type": "worker", "index": 0}})"),
              Invalid("TF_CONFIG: no \"cluster\""));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": ["a:1"]})"),
              Invalid("\"cluster\" must be an object mapping job names to lists of \"host:port\" "
                      "addresses, not an array (at byte 12)"));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {}})"),
              Invalid("\"cluster\" has no \"chief\" and no \"worker\" job: nobody to train"));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {"ps": ["a:1"]}})"),
              Invalid("no \"chief\" and no \"worker\" job (ps 1): nobody to train"));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {"master": ["a:1"]}})"),
              AllOf(Invalid("unknown job \"master\""),
                    Invalid("\"chief\", \"worker\", \"ps\", \"evaluator\"")));
  EXPECT_THAT(CreateStatus(0, 2, R"({"cluster": {"worker": ["a:1"], "worker": ["b:1"]}})"),
              Invalid("duplicate object key \"worker\""));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {"worker": []}})"),
              Invalid("job \"worker\" has no tasks"));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {"worker": "a:1"}})"),
              Invalid("job \"worker\" must be a list of \"host:port\" addresses, not a string"));
  EXPECT_THAT(CreateStatus(0, 2, R"({"cluster": {"worker": {"0": "a:1", "1": "b:1"}}})"),
              Invalid("sparse {index: address} form is not supported"));
  EXPECT_THAT(CreateStatus(0, 2, R"({"cluster": {"worker": ["a:1", 7]}})"),
              Invalid("task 1 of job \"worker\" must be a non-empty \"host:port\" string, not a "
                      "number"));
  EXPECT_THAT(CreateStatus(0, 2, R"({"cluster": {"worker": ["a:1", ""]}})"),
              Invalid("not an empty string"));
  EXPECT_THAT(CreateStatus(0, 2, R"({"cluster": {"worker": [null, "a:1"]}})"),
              Invalid("task 0 of job \"worker\" must be a non-empty \"host:port\" string, not "
                      "null"));
  EXPECT_THAT(CreateStatus(0, 3, R"({"cluster": {"chief": ["a:1", "b:1"], "worker": ["c:1"]}})"),
              Invalid("job \"chief\" has 2 tasks; a cluster has at most one chief"));
  EXPECT_THAT(CreateStatus(0, 3, R"({"cluster": {"worker": ["a:1"], "evaluator": ["b", "c"]}})"),
              Invalid("at most one evaluator"));
}

TEST(ClusterSpec, TfConfigTotalMustMatchTheLaunch) {
  EXPECT_THAT(CreateStatus(0, 3, kFull),
              AllOf(Invalid("the cluster has 5 tasks (chief 1, worker 2, ps 1, evaluator 1) but "
                            "this run has 3 processes"),
                    Invalid("mpirun -np must match the number of tasks")));
  EXPECT_THAT(CreateStatus(0, 1, R"({"cluster": {"worker": ["a:1", "b:1"]}})"),
              Invalid("has 2 tasks (worker 2) but this run has 1 process"));
  EXPECT_THAT(CreateStatus(0, 5, kFull, /*ps_tasks=*/2),
              AllOf(Invalid("--ps-tasks=2 disagrees with the cluster, which has 1 task in job "
                            "\"ps\""),
                    Invalid("give the parameter servers once")));
  EXPECT_THAT(CreateStatus(0, 2, R"({"cluster": {"worker": ["a:1", "b:1"]}})", 1),
              Invalid("which has 0 tasks in job \"ps\""));
}

TEST(ClusterSpec, TfConfigBadTask) {
  const std::string base = R"({"cluster": {"worker": ["a:1", "b:1"], "ps": ["p:1"]}, "task": )";
  auto with_task = [&](const std::string& task) { return CreateStatus(0, 3, base + task + "}"); };
  EXPECT_THAT(with_task("[]"), Invalid("\"task\" must be an object {\"type\": \"worker\", "
                                       "\"index\": 0}, not an array"));
  EXPECT_THAT(with_task(R"({"index": 0})"), Invalid("\"task\" has no \"type\""));
  EXPECT_THAT(with_task(R"({"type": 1, "index": 0})"),
              Invalid("\"task\"'s \"type\" must be a string naming a job, not a number"));
  EXPECT_THAT(with_task(R"({"type": "worker"})"), Invalid("\"task\" has no \"index\""));
  EXPECT_THAT(with_task(R"({"type": "worker", "index": "0"})"),
              Invalid("\"task\"'s \"index\" must be a whole number, not a string"));
  EXPECT_THAT(with_task(R"({"type": "worker", "index": 1.5})"),
              Invalid("must be a whole number, not \"1.5\""));
  EXPECT_THAT(with_task(R"({"type": "worker", "index": 1e30})"),
              Invalid("must be a whole number, not \"1e30\""));
  EXPECT_THAT(with_task(R"({"type": "worker", "index": -1})"),
              Invalid("\"task\"'s \"index\" -1 is negative; job \"worker\" has 2 tasks (0..1)"));
  EXPECT_THAT(with_task(R"({"type": "worker", "index": 2})"),
              Invalid("\"task\"'s \"index\" 2 is out of range: job \"worker\" has 2 tasks (0..1)"));
  EXPECT_THAT(with_task(R"({"type": "ps", "index": 1})"), Invalid("job \"ps\" has 1 task (0..0)"));
  EXPECT_THAT(with_task(R"({"type": "worker", "index": 99999999999})"), Invalid("is out of range"));
  EXPECT_THAT(with_task(R"({"type": "chief", "index": 0})"),
              Invalid("\"task\"'s type \"chief\" is not a job of \"cluster\"; its jobs are "
                      "\"worker\", \"ps\""));
  EXPECT_THAT(with_task(R"({"type": "worker", "index": 0, "trial": 1})"),
              Invalid("unknown key \"trial\" in \"task\""));
}

TEST(ClusterSpec, HostileTfConfigMessagesStayShort) {
  const std::string huge_job = std::string(100000, 'x');
  absl::Status s = CreateStatus(0, 1, absl::StrCat(R"({"cluster": {")", huge_job, R"(": []}})"));
  EXPECT_THAT(s, Invalid("unknown job \"xxxx"));
  EXPECT_LT(s.message().size(), 400u);
  std::string deep = std::string(1000, '[');
  EXPECT_THAT(CreateStatus(0, 1, deep), Invalid("nested deeper than 64 levels"));
}

}  // namespace
}  // namespace vgpu
