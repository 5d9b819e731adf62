#include <gtest/gtest.h>

#include <map>

#include "lowcomm/base/error.h"
#include "lowcomm/net/env.h"

using namespace lowcomm;
using namespace lowcomm::net;

namespace {
GetEnv from(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* n) -> const char* {
    auto it = shared->find(n);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}
}  // namespace

TEST(WorkerEnv, NoneWhenNoLauncherVariables) { EXPECT_FALSE(detectWorkerEnv(from({})).has_value()); }

TEST(WorkerEnv, Torchrun) {
  auto e = detectWorkerEnv(from({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "1234"}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "torchrun");
  EXPECT_EQ(e->rank, 3);
  EXPECT_EQ(e->world, 8);
  EXPECT_EQ(e->local_rank, 1);
  EXPECT_EQ(e->local_world, 2);
  EXPECT_EQ(e->master_addr, "10.1.2.3");
  EXPECT_EQ(e->master_port, 1234);
}

TEST(WorkerEnv, Slurm) {
  auto e = detectWorkerEnv(
      from({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "6"}, {"SLURM_LOCALID", "2"}, {"SLURM_NTASKS_PER_NODE", "3(x2)"},
            {"MASTER_ADDR", "node1"}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "slurm");
  EXPECT_EQ(e->rank, 5);
  EXPECT_EQ(e->world, 6);
  EXPECT_EQ(e->local_rank, 2);
  EXPECT_EQ(e->local_world, 3);
  EXPECT_EQ(e->master_addr, "node1");
}

TEST(WorkerEnv, OpenMpiAndPmi) {
  auto e = detectWorkerEnv(from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
  ASSERT_TRUE(e);
  EXPECT_EQ(e->source, "openmpi");
  EXPECT_EQ(e->world, 4);
  auto p = detectWorkerEnv(from({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}, {"MASTER_ADDR", "10.0.0.1"}}));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->source, "pmi");
  EXPECT_EQ(p->local_world, 2);
}

TEST(WorkerEnv, MalformedValuesNameTheVariable) {
  auto expectError = [](std::map<std::string, std::string> m, const std::string& needle) {
    try {
      detectWorkerEnv(from(m));
      ADD_FAILURE() << "no error for " << needle;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expectError({{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "RANK='x'");
  expectError({{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK=2");
  expectError({{"RANK", "0"}}, "WORLD_SIZE is missing");
  expectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}}, "MASTER_PORT");
  // The whole value must be an integer: no trailing or leading garbage.
  expectError({{"RANK", "1x"}, {"WORLD_SIZE", "2"}}, "RANK='1x'");
  expectError({{"RANK", "0"}, {"WORLD_SIZE", " 2"}}, "WORLD_SIZE=' 2'");
  expectError({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_WORLD_SIZE", "2(x3)"}}, "LOCAL_WORLD_SIZE='2(x3)'");
  expectError({{"RANK", "0"}, {"WORLD_SIZE", "99999999999999999999"}}, "WORLD_SIZE=");
  expectError({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}, {"SLURM_NTASKS_PER_NODE", "1(x2"}, {"MASTER_ADDR", "h"}},
              "SLURM_NTASKS_PER_NODE='1(x2'");
}

// Slurm and MPI do not set MASTER_ADDR: a job spanning hosts must not silently rendezvous at 127.0.0.1.
TEST(WorkerEnv, MissingMasterAddrOfAMultiHostJobIsAnError) {
  auto error = [](std::map<std::string, std::string> m) -> std::string {
    try {
      detectWorkerEnv(from(m));
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  const std::string slurm = error({{"SLURM_PROCID", "1"}, {"SLURM_NTASKS", "4"}, {"SLURM_NTASKS_PER_NODE", "2(x2)"}});
  EXPECT_NE(slurm.find("MASTER_ADDR is not set"), std::string::npos) << slurm;
  EXPECT_NE(slurm.find("SLURM_NTASKS_PER_NODE=2"), std::string::npos) << slurm;
  const std::string pmi = error({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}});
  EXPECT_NE(pmi.find("MPI_LOCALNRANKS is not set"), std::string::npos) << pmi;
  // Every rank on this host (the launcher says so), a single rank, or torchrun: 127.0.0.1 is right.
  auto local = detectWorkerEnv(from({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"},
                                     {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  ASSERT_TRUE(local);
  EXPECT_EQ(local->master_addr, "127.0.0.1");
  EXPECT_TRUE(detectWorkerEnv(from({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}})));
  EXPECT_TRUE(detectWorkerEnv(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}})));
}

TEST(WorkerEnv, SiteFromLowcommSite) {
  EXPECT_EQ(siteFromEnv(from({})), -1);
  EXPECT_EQ(siteFromEnv(from({{"LOWCOMM_SITE", ""}})), -1);
  EXPECT_EQ(siteFromEnv(from({{"LOWCOMM_SITE", "0"}})), 0);
  EXPECT_EQ(siteFromEnv(from({{"LOWCOMM_SITE", "3"}})), 3);
  for (const char* bad : {"-1", "x", "1x", " 2"}) {
    try {
      siteFromEnv(from({{"LOWCOMM_SITE", bad}}));
      ADD_FAILURE() << "no error for " << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("LOWCOMM_SITE"), std::string::npos) << e.what();
    }
  }
}
