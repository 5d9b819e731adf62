// TrainingRun's summary (collective): totals over ranks, the grid's and the pipeline's blocks.
#include <algorithm>
#include <vector>

#include "report.h"
#include "training_run.h"

namespace lowcomm::train {

namespace {

double sumOver(comm::Communicator& c, double v) {
  c.allreduce(&v, 1, comm::DType::f64, comm::ReduceOp::sum);
  return v;
}

}  // namespace

// The grid and the bytes each axis sent, summed over the ranks (collective). The data-parallel
// axis is everything the strategy sent (all phases but "tp" and "pp").
nlohmann::json TrainingRun::parallelJson() const {
  const auto snap = world_->meter().snapshot();
  auto phase = [&](const char* p) {
    const auto it = snap.by_phase.find(p);
    return it == snap.by_phase.end() ? 0.0 : static_cast<double>(it->second.bytes_sent);
  };
  double v[3] = {phase(parallel::kTensorParallelPhase), phase(parallel::kPipelineParallelPhase),
                 static_cast<double>(snap.total.bytes_sent)};
  v[2] -= v[0] + v[1];
  world_->allreduce(v, 3, comm::DType::f64, comm::ReduceOp::sum);
  nlohmann::json j = {{"dp", grid_.dp}, {"tp", grid_.tp}, {"pp", grid_.pp}, {"order", grid_.order},
                      {"coordinates", {{"dp", grid_.dp_rank}, {"tp", grid_.tp_rank}, {"pp", grid_.pp_rank}}},
                      {"parameters_this_rank", nn::parameterCount(*model_)},
                      {"bytes_sent_by_axis", {{"dp", static_cast<int64_t>(v[2])}, {"tp", static_cast<int64_t>(v[0])},
                                              {"pp", static_cast<int64_t>(v[1])}}}};
  if (pipeline_) j["pipeline"] = pipelineJson();
  return j;
}

// Per stage (gathered over the pipeline): measured bubble, in-flight micro-batches, activation
// memory; and the schedule's theoretical bubble (collective over the pipeline).
nlohmann::json TrainingRun::pipelineJson() const {
  const auto& st = pipeline_->stats();
  const int p = grid_.pp;
  double mine[4] = {st.bubble(), static_cast<double>(st.max_in_flight), static_cast<double>(st.peak_activation_bytes),
                    st.wall_s / std::max<int64_t>(1, st.steps)};
  std::vector<double> all(4 * p);
  grid_.pp_comm->allgather(mine, all.data(), 4, comm::DType::f64);
  nlohmann::json stages = nlohmann::json::array();
  double bubble = 0;
  for (int s = 0; s < p; ++s) {
    stages.push_back({{"stage", s}, {"bubble_fraction", all[4 * s]}, {"max_in_flight", static_cast<int>(all[4 * s + 1])},
                      {"peak_activation_bytes", static_cast<int64_t>(all[4 * s + 2])}, {"step_s", all[4 * s + 3]}});
    bubble += all[4 * s] / p;
  }
  nlohmann::json chunks = nlohmann::json::array();  // [first, last) units of each of this rank's chunks
  for (int k = 0; k < shard_->chunks(); ++k) chunks.push_back({shard_->chunkUnits(k).first, shard_->chunkUnits(k).second});
  return {{"schedule", cfg_.parallel.schedule}, {"micro_batches", cfg_.parallel.micro_batches},
          {"virtual_stages", shard_->chunks()}, {"bubble_fraction", bubble}, {"bubble_fraction_theory", st.theory},
          {"stages", stages}, {"units_this_stage", chunks.size() == 1 ? chunks[0] : chunks},
          {"stage_cut", cut_.json(cfg_.parallel.balance)}};
}

// Totals over ranks, and the straggler (the rank that waited least: the others waited for it).
nlohmann::json TrainingRun::summary(double wall) {
  const auto [sent, recv] = bytes();
  const auto final_traffic = world_->meter().snapshot();  // before the summary's own reductions
  const double total_sent = sumOver(*world_, static_cast<double>(sent));
  // Summed over ranks, like bytes_sent; bytes_by_phase and bytes_by_phase_link are rank 0's.
  const bool sites = world_->topology().spansSites();  // the same on every rank: sumOver is collective
  nlohmann::json linkTotals = linksJson(final_traffic, sites);
  for (const char* link : linkClasses(sites))
    linkTotals[link] = static_cast<int64_t>(sumOver(*world_, linkTotals[link]["sent"].get<double>()));
  const auto st = strategy_->stats();
  std::vector<double> waits(n_);
  double my_wait = st.wait_s;
  world_->allgather(&my_wait, waits.data(), 1, comm::DType::f64);
  const int straggler = static_cast<int>(std::min_element(waits.begin(), waits.end()) - waits.begin());
  const int64_t samples = (step_ - state_.step) * accum_ * cfg_.data.batch_size * n_;
  nlohmann::json s = {
      {"strategy", cfg_.strategy.name}, {"model", cfg_.model.name}, {"dataset", cfg_.data.dataset}, {"world", n_},
      {"steps", step_}, {"epochs", static_cast<double>(step_) / static_cast<double>(per_epoch_)}, {"wall_s", wall},
      {"test_accuracy", last_eval_.accuracy}, {"test_loss", last_eval_.loss},
      {"bytes_sent", static_cast<int64_t>(total_sent)}, {"bytes_sent_per_rank", static_cast<int64_t>(total_sent / n_)},
      {"bytes_by_phase", phasesJson(final_traffic)},
      {"bytes_by_phase_link", phaseLinksJson(final_traffic, sites)},
      {"bytes_sent_by_link", linkTotals},
      {"compression_ratio", compressionRatio()},
      {"checkpoint", checkpointFile(ckpt_dir_.string(), step_, 0)},
      {"samples_per_s", static_cast<double>(samples) / std::max(1e-9, wall - state_.elapsed_s)},
      {"comm_s", st.comm_s}, {"wait_s", st.wait_s}, {"compute_s", total_compute_}, {"train_s", total_step_s_},
      {"compute_utilization", total_compute_ / std::max(total_step_s_, 1e-9)},
      {"comm_hidden_fraction", st.comm_s > 0 ? std::max(0.0, 1.0 - st.wait_s / st.comm_s) : 0.0},
      {"straggler_rank", straggler}, {"wait_s_by_rank", waits},
      {"parameters", full_parameters_}, {"buckets", strategy_->buckets()},
      {"codec", cfg_.compress.codec}, {"compression", compressionJson(compressors_, cfg_)},
      {"memory", memory_}};
  double rss = static_cast<double>(peakRssBytes());  // serialising the final checkpoint included
  world_->allreduce(&rss, 1, comm::DType::f64, comm::ReduceOp::max);
  s["memory"]["peak_rss_with_checkpoint_bytes_max_rank"] = static_cast<int64_t>(rss);
  if (lm()) s["bits_per_byte"] = bitsPerByte(last_eval_.loss);
  s["parallel"] = parallelJson();
  if (sites)  // the world's transport across sites (comm.streams; auto: what it measured and chose)
    s["streams"] = {{"per_cross_site_pair", world_->streams()},
                    {"auto", world_->options().streams == comm::kAutoStreams},
                    {"cross_site_rtt_us", world_->crossSiteRtt() * 1e6}};
  if (cfg_.fault.slow_rank >= 0)
    s["fault"] = {{"slow_rank", cfg_.fault.slow_rank}, {"slow_factor", cfg_.fault.slow_factor}};
  s["restarts"] = opts_.restart_count;
  s["resumes"] = rank_ == 0 ? resumeRecords((out_dir_ / "metrics.jsonl").string()) : nlohmann::json::array();
  if (auto block = strategy_->summary(); !block.is_null()) s[cfg_.strategy.name] = block;
  // A strategy that rebuilds its DDP (and codec) has one compressor per rebuild: the ratio over
  // the whole run is the summed one, not the last hook's.
  if (!compressors_.empty()) s["compression_ratio"] = s["compression"]["ratio"];
  if (elastic_) s["elastic"] = elasticJson(wall);
  return s;
}

}  // namespace lowcomm::train
