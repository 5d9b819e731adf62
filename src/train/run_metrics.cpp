// TrainingRun's metrics: metrics.jsonl records, the byte counters, the progress line.
#include <algorithm>
#include <cstdio>
#include <string>

#include "training_run.h"

namespace lowcomm::train {

namespace {

std::string human(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string duration(double s) {
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof(buf), "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(s / 60) % 60);
  else std::snprintf(buf, sizeof(buf), "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(s) % 60);
  return buf;
}

}  // namespace

void TrainingRun::openMetrics() {
  step_ = state_.step;
  last_lr_ = schedule_->at(step_);
  t_start_ = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(state_.elapsed_s));
  sent_before_ = state_.bytes_sent, recv_before_ = state_.bytes_recv;
  if (rank_ != 0) return;
  const std::string metrics = (out_dir_ / "metrics.jsonl").string();
  int64_t reached = state_.step;  // the last step the interrupted run logged
  if (resumed_) reached = truncateMetricsAfterCheckpoint(metrics, state_.step);  // no step twice
  else removeLatest(ckpt_dir_.string());  // a --resume after this run must not find an older run's
  jsonl_ = std::make_unique<JsonlWriter>(metrics, resumed_);
  if (resumed_)
    jsonl_->write({{"type", "resume"}, {"step", state_.step}, {"from_step", state_.step},
                   {"steps_lost", std::max<int64_t>(0, reached - state_.step)}, {"restart", opts_.restart_count}});
}

std::pair<int64_t, int64_t> TrainingRun::bytes() const {
  const auto s = world_->meter().snapshot();
  return {sent_before_ + static_cast<int64_t>(s.total.bytes_sent), recv_before_ + static_cast<int64_t>(s.total.bytes_recv)};
}

nlohmann::json TrainingRun::withBytes(nlohmann::json j) const {
  j["bytes_sent"] = bytes().first;
  j["time_s"] = since(t_start_);
  return j;
}

void TrainingRun::logStep(const std::string& phase) {
  const auto [sent, recv] = bytes();
  const int replicas = elastic_ ? slots_ : n_;  // --elastic: every step averages all slots' batches
  const double sps = static_cast<double>(win_.steps * accum_ * cfg_.data.batch_size * replicas) / std::max(win_.time, 1e-9);
  if (jsonl_) {
    const auto snap = world_->meter().snapshot();
    nlohmann::json rec = {{"type", "step"}, {"step", step_}, {"epoch", loader_->position().epoch + 1},
                          {"loss", win_.loss / win_.steps}, {"lr", last_lr_}, {"samples_per_s", sps},
                          {"compute_s", win_.compute / win_.steps}, {"comm_s", strategy_->stats().comm_s},
                          {"wait_s", (win_.time - win_.compute) / win_.steps},
                          {"compute_utilization", win_.compute / std::max(win_.time, 1e-9)}, {"bytes_sent", sent},
                          {"bytes_recv", recv}, {"bytes_by_phase", phasesJson(snap)},
                          {"bytes_by_link", linksJson(snap, world_->topology().spansSites())},
                          {"compression_ratio", compressionRatio()}, {"time_s", since(t_start_)},
                          {"phase", phase}, {"phases", win_.phases}};
    rec.update(strategy_->stepFields());
    jsonl_->write(rec);
  }
  char line[256];
  const double eta = (since(t_start_) / std::max<int64_t>(1, step_ - state_.step)) * static_cast<double>(total_ - step_);
  std::snprintf(line, sizeof(line), "epoch %lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f samples/s  sent %s  ETA %s",
                static_cast<long long>(loader_->position().epoch + 1), static_cast<long long>(step_),
                static_cast<long long>(total_), win_.loss / win_.steps, schedule_->at(step_ - 1), sps,
                human(static_cast<double>(sent)).c_str(), duration(eta).c_str());
  progress_.update(line);
  win_ = Window{};
}

}  // namespace lowcomm::train
