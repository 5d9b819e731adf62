#include "lowcomm/train/trainer.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "ab_report.h"
#include "autocast.h"
#include "lowcomm/base/error.h"
#include "lowcomm/base/trace.h"
#include "lowcomm/data/dataset.h"
#include "lowcomm/data/loader.h"
#include "lowcomm/nn/models.h"
#include "lowcomm/parallel/compress_hook.h"
#include "lowcomm/parallel/ddp.h"
#include "lowcomm/train/checkpoint.h"
#include "lowcomm/train/checkpoint_schedule.h"
#include "lowcomm/train/metrics.h"
#include "lowcomm/train/optim.h"
#include "lowcomm/train/same_job.h"

namespace lowcomm::train {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Keys a resumed run must share with the run that wrote the checkpoint.
// Compressor state only fits the compressor that wrote it (codec, memory, auto candidates).
std::string compressKey(const compress::CompressConfig& z) {
  std::string k = z.codec + "/" + z.memory;
  if (z.codec == "auto")
    for (const auto& c : z.auto_candidates) k += "/" + c;
  return k == "none/default" ? "" : k;  // checkpoints from before [compress] existed stay valid
}

// Width, dropout and init joined the key later: defaults add nothing, so older checkpoints stay valid.
std::string modelKey(const TrainConfig& c) {
  std::string k;
  if (c.model.width != 1.0) k += "|w" + std::to_string(c.model.width);
  if (c.model.dropout != 0.0) k += "|d" + std::to_string(c.model.dropout);
  if (c.model.init != "default") k += "|" + c.model.init;
  if (c.model.autocast != "off") k += "|amp-" + c.model.autocast;
  return k;
}

uint64_t resumeHash(const TrainConfig& c, int world) {
  const std::string key = c.model.name + "|" + std::to_string(c.model.vit_patch) + "|" +
                          std::to_string(c.model.vit_depth) + modelKey(c) + "|" + c.data.dataset + "|" +
                          std::to_string(c.data.batch_size) + "|" + std::to_string(c.data.train_limit) + "|" +
                          std::to_string(c.strategy.accumulation) + "|" + c.optimizer.name + "|" +
                          std::to_string(c.seed) + "|" + std::to_string(world) + "|" + compressKey(c.compress) +
                          abResumeKey(c);
  uint64_t h = 1469598103934665603ull;
  for (char ch : key) h = (h ^ static_cast<uint8_t>(ch)) * 1099511628211ull;
  return h >> 1;  // stored as int64
}

double sumOver(comm::Communicator& c, double v) {
  c.allreduce(&v, 1, comm::DType::f64, comm::ReduceOp::sum);
  return v;
}

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

struct Eval {
  double accuracy = 0, loss = 0;
  int64_t samples = 0;
};

// Every rank evaluates its shard of the test set; sums are combined over the world.
using Forward = std::function<torch::Tensor(const torch::Tensor&)>;

Eval evaluate(nn::Model& model, const Forward& forward, parallel::DataParallel& ddp, comm::Communicator& world,
              const data::Dataset& test, const TrainConfig& c) {
  ddp.averageBuffers();  // BatchNorm statistics differ per rank
  model.eval();
  torch::NoGradGuard no_grad;
  const int64_t shard = test.size() / world.size();
  const int64_t batch = std::max<int64_t>(1, std::min(c.data.test_batch_size, shard));
  data::BatchLoader loader(test, world.rank(), world.size(), batch, c.seed, {}, /*shuffle=*/false, /*dropLast=*/false);
  loader.startEpoch(0);
  double correct = 0, loss = 0, count = 0;
  data::Batch b;
  while (loader.next(b)) {
    auto out = forward(b.x);
    loss += torch::nn::functional::cross_entropy(out, b.y, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)).item<double>();
    correct += out.argmax(1).eq(b.y).sum().item<double>();
    count += static_cast<double>(b.y.size(0));
  }
  model.train();
  double v[3] = {correct, loss, count};
  world.allreduce(v, 3, comm::DType::f64, comm::ReduceOp::sum);
  return Eval{v[0] / std::max(1.0, v[2]), v[1] / std::max(1.0, v[2]), static_cast<int64_t>(v[2])};
}

// FNV-1a over every parameter's bytes (non-negative).
int64_t weightsHash(torch::nn::Module& model) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& p : model.parameters()) {
    const auto t = p.detach().contiguous();
    const auto* bytes = static_cast<const uint8_t*>(t.data_ptr());
    for (size_t i = 0, e = static_cast<size_t>(t.numel()) * t.element_size(); i < e; ++i)
      h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 1);
}

// Every rank must have loaded the checkpoint `latest` names, and the ranks of `alike` (the
// communicator DDP runs on: the world for data parallelism, an AB group in AB-training's ab
// phase, where groups differ by design; null when no two ranks must agree, as in AB's
// `individual` setup) the same weights: a stale or foreign file on one rank is
// a DataError naming it, not a silently diverging run.
void checkResumedAlike(comm::Communicator& world, comm::Communicator* alike, int64_t loaded_step, int64_t latest,
                       torch::nn::Module& model, const std::string& file) {
  int64_t step = loaded_step;
  std::vector<int64_t> steps(world.size());
  world.allgather(&step, steps.data(), 1, comm::DType::i64);
  for (int r = 0; r < world.size(); ++r)
    if (steps[r] != latest)
      throw DataError("--resume: rank " + std::to_string(r) + " loaded step " + std::to_string(steps[r]) +
                      " from its checkpoint file, but 'latest' names step " + std::to_string(latest) +
                      (r == world.rank() ? " ('" + file + "')" : std::string()));
  if (!alike) return;
  int64_t mine[2] = {world.rank(), weightsHash(model)};
  std::vector<int64_t> all(2 * alike->size());
  alike->allgather(mine, all.data(), 2, comm::DType::i64);
  int64_t verdict[2] = {-1, all[0]};  // a rank of this group holding other weights, and whose
  for (int r = 1; r < alike->size() && verdict[0] < 0; ++r)
    if (all[2 * r + 1] != all[1]) verdict[0] = all[2 * r];
  // Every rank learns every group's verdict, so no group trains on while another has stopped.
  std::vector<int64_t> verdicts(2 * world.size());
  world.allgather(verdict, verdicts.data(), 2, comm::DType::i64);
  for (int r = 0; r < world.size(); ++r)
    if (verdicts[2 * r] >= 0)
      throw DataError("--resume: rank " + std::to_string(verdicts[2 * r]) + "'s checkpoint of step " +
                      std::to_string(latest) + " holds other weights than rank " + std::to_string(verdicts[2 * r + 1]) +
                      "'s, which it trains in step with" +
                      (verdicts[2 * r] == world.rank() ? " ('" + file + "')" : std::string()));
}

}  // namespace

namespace {

// This rank's codec accounting: raw gradient bytes against encoded bytes, codec time, and the
// auto policy's decisions.
// AB-training builds one compressor per DDP rebuild: their counts are summed.
nlohmann::json compressionJson(const std::vector<std::shared_ptr<compress::Compressor>>& all, const TrainConfig& cfg) {
  if (all.empty()) return {{"codec", "none"}};
  const compress::Compressor* c = all.back().get();
  compress::CompressStats s;
  for (const auto& x : all) {
    const auto t = x->stats();
    s.raw_bytes += t.raw_bytes, s.payload_bytes += t.payload_bytes, s.buckets += t.buckets, s.codec_s += t.codec_s;
  }
  return {{"codec", c->name()},
          {"memory", cfg.compress.memory == "default" ? compress::defaultMemory(cfg.compress.codec) : cfg.compress.memory},
          {"raw_bytes", s.raw_bytes}, {"payload_bytes", s.payload_bytes}, {"ratio", s.ratio()},
          {"codec_s", s.codec_s}, {"decisions", c->decisions()}};
}

}  // namespace

nlohmann::json runTraining(const TrainConfig& cfg, std::shared_ptr<comm::Communicator> world, const TrainOptions& opts) {
  const int rank = world->rank(), n = world->size();
  const fs::path out_dir(cfg.logging.out_dir);
  const fs::path ckpt_dir = cfg.checkpoint.dir.empty() ? out_dir / "checkpoints" : fs::path(cfg.checkpoint.dir);
  // Data and model: the same on every rank (rank 0's initial weights are broadcast anyway).
  torch::manual_seed(cfg.seed);
  data::Dataset train = data::loadDataset(cfg.data.dataset, cfg.data.dir, true, cfg.seed);
  data::Dataset test = data::loadDataset(cfg.data.dataset, cfg.data.dir, false, cfg.seed);
  if (cfg.data.train_limit > 0) train = train.take(cfg.data.train_limit);
  if (cfg.data.test_limit > 0) test = test.take(cfg.data.test_limit);
  if (train.height() != train.width()) throw ConfigError("data.dataset: images must be square");
  checkSameJob(*world, jobDescription(toToml(cfg), train.size(), test.size(), n));  // before anything is written
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw ConfigError("cannot create logging.out_dir '" + out_dir.string() + "': " + ec.message());
  if (rank == 0) writeFileAtomically((out_dir / "config.toml").string(), toToml(cfg));
  nn::ModelSpec spec{cfg.model.name, static_cast<int>(train.channels()), static_cast<int>(train.height()),
                     train.classes, static_cast<int>(cfg.model.vit_patch), static_cast<int>(cfg.model.vit_depth),
                     cfg.model.width, cfg.model.dropout, cfg.model.init};
  auto model = nn::makeModel(spec);

  Trace trace;
  trace.setEnabled(!opts.timeline_path.empty());
  parallel::DdpOptions dopt;
  dopt.bucket_bytes = static_cast<size_t>(cfg.strategy.bucket_mb * 1024 * 1024);
  dopt.overlap = cfg.strategy.overlap;
  std::vector<std::shared_ptr<compress::Compressor>> compressors;
  auto makeHook = [&]() -> std::shared_ptr<parallel::BucketHook> {
    if (cfg.compress.codec == "none") return nullptr;
    compress::CompressConfig cc = cfg.compress;
    cc.seed = cfg.seed;
    compressors.push_back(compress::makeCompressor(cc));
    return std::make_shared<parallel::CompressHook>(compressors.back());
  };
  data::Augment aug;
  if (cfg.data.augment) aug = data::Augment{true, train.height() >= 32 ? 4 : 2, true};
  data::BatchLoader loader(train, rank, n, cfg.data.batch_size, cfg.seed, aug);
  const int64_t accum = cfg.strategy.accumulation;
  const int64_t per_epoch = loader.batchesPerEpoch() / accum;
  if (per_epoch < 1)
    throw ConfigError("data.batch_size x strategy.accumulation is larger than a rank's share of the data");
  int64_t total = cfg.schedule.epochs * per_epoch;
  if (cfg.schedule.max_steps > 0) total = std::min(total, cfg.schedule.max_steps);
  const LrSchedule schedule(cfg, total);
  auto optimizer = makeOptimizer(cfg, model->parameters());
  // The strategy: plain DDP, or AB-training, which rebuilds its DDP at every phase switch.
  std::unique_ptr<parallel::DataParallel> plain;
  std::unique_ptr<parallel::AbTraining> ab;
  if (cfg.strategy.name == "ab")
    ab = std::make_unique<parallel::AbTraining>(world, model, *optimizer, abOptions(cfg, total), dopt, makeHook, &trace);
  else
    plain = std::make_unique<parallel::DataParallel>(world, model, dopt, makeHook(), &trace);
  auto ddp = [&]() -> parallel::DataParallel& { return ab ? ab->ddp() : *plain; };
  auto ddpStats = [&] { return ab ? ab->stats() : plain->stats(); };
  const Forward forward = [&](const torch::Tensor& x) { return ab ? ab->forward(x) : model->forward(x); };


  TrainState state;
  state.config_hash = resumeHash(cfg, n);
  int64_t resume_step = -1;  // a restart before the first checkpoint starts afresh
  if (opts.resume || opts.restart_count > 0) {
    resume_step = rank == 0 ? readLatest(ckpt_dir.string()) : 0;
    world->broadcast(&resume_step, 1, comm::DType::i64, 0);
    if (resume_step < 0 && opts.resume)
      throw ConfigError("--resume: no checkpoint in '" + ckpt_dir.string() + "' (no 'latest' file)");
  }
  const bool resumed = resume_step >= 0;
  if (resumed) {
    const std::string file = checkpointFile(ckpt_dir.string(), resume_step, rank);
    const uint64_t want = state.config_hash;
    if (ab) loadStrategySection(file, [&](torch::serialize::InputArchive& ar) { ab->loadState(ar); });
    state = loadCheckpoint(file, *model, *optimizer, ddp().hook());
    if (state.config_hash != want)
      throw ConfigError("--resume: '" + file + "' was written with a different model, data, batch, seed, world size or compress codec");
    const bool individual = ab && ab->phase() == parallel::AbPhase::ab && ab->options().train_setup == "individual";
    checkResumedAlike(*world, individual ? nullptr : &ddp().comm(), state.step, resume_step, *model, file);
    loader.seek(state.position);
  } else {
    loader.startEpoch(0);
  }

  std::unique_ptr<JsonlWriter> jsonl;
  if (rank == 0) {
    const std::string metrics = (out_dir / "metrics.jsonl").string();
    int64_t reached = state.step;  // the last step the interrupted run logged
    if (resumed) reached = truncateMetricsAfterCheckpoint(metrics, state.step);  // no step twice
    else removeLatest(ckpt_dir.string());  // a --resume after this run must not find an older run's
    jsonl = std::make_unique<JsonlWriter>(metrics, resumed);
    if (resumed)
      jsonl->write({{"type", "resume"}, {"step", state.step}, {"from_step", state.step},
                    {"steps_lost", std::max<int64_t>(0, reached - state.step)}, {"restart", opts.restart_count}});
  }
  Progress progress(rank == 0 && cfg.logging.progress);
  const auto t_start = Clock::now() - std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(state.elapsed_s));
  const int64_t sent_before = state.bytes_sent, recv_before = state.bytes_recv;
  auto bytes = [&] {
    const auto s = world->meter().snapshot();
    return std::make_pair(sent_before + static_cast<int64_t>(s.total.bytes_sent),
                          recv_before + static_cast<int64_t>(s.total.bytes_recv));
  };
  auto saveAt = [&](int64_t step) {
    fs::create_directories(ckpt_dir, ec);
    TrainState st = state;
    st.step = step;
    st.position = loader.position();
    st.elapsed_s = since(t_start);
    std::tie(st.bytes_sent, st.bytes_recv) = bytes();
    SectionWriter strategy_state;
    if (ab) strategy_state = [&](torch::serialize::OutputArchive& ar) { ab->saveState(ar); };
    saveCheckpoint(checkpointFile(ckpt_dir.string(), step, rank), *model, *optimizer, st, ddp().hook(), strategy_state);
    world->barrier();  // every rank's file is complete before `latest` names it
    if (rank == 0) writeLatest(ckpt_dir.string(), step);
    if (jsonl) jsonl->write({{"type", "checkpoint"}, {"step", step}, {"time_s", since(t_start)}});
    if (cfg.checkpoint.keep_last > 0) {
      world->barrier();  // `latest` names the new checkpoint before any rank removes an old one
      pruneCheckpoints(ckpt_dir.string(), rank, step, cfg.checkpoint.keep_last);
    }
  };

  const auto label_opts = torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(cfg.optimizer.label_smoothing);
  Eval last_eval;
  int64_t last_eval_step = -1, step = state.step;
  double win_loss = 0, win_compute = 0, win_time = 0, total_compute = 0;
  int64_t win_steps = 0;
  double last_lr = schedule.at(step);
  std::map<std::string, int64_t> win_phases;  // AB phase label -> steps in this log window
  auto withBytes = [&](nlohmann::json j) {
    j["bytes_sent"] = bytes().first;
    j["time_s"] = since(t_start);
    return j;
  };
  // Evaluates now and writes the record. In the ab phase every rank evaluates its own group's
  // model (A and B not yet merged): the accuracy is the average over the ranks' shards of those.
  auto evalNow = [&](int64_t epoch, bool final = false) {
    last_eval = evaluate(*model, forward, ddp(), *world, test, cfg);
    last_eval_step = step;
    if (!jsonl) return;
    nlohmann::json rec = {{"type", "eval"}, {"step", step}, {"epoch", epoch},
                          {"test_accuracy", last_eval.accuracy}, {"test_loss", last_eval.loss},
                          {"samples", last_eval.samples}, {"bytes_sent", bytes().first}, {"time_s", since(t_start)}};
    if (ab && !final) rec["ab_phase"] = parallel::abPhaseName(ab->phase());  // the final model is merged
    jsonl->write(rec);
  };
  CheckpointSchedule checkpoints(cfg.checkpoint.every_steps, cfg.checkpoint.every_minutes, step, total);
  const auto t_run = Clock::now();  // this process's training time (t_start includes earlier runs')
  model->train();
  while (step < total) {
    auto pos = loader.position();
    if (pos.batch + accum > loader.batchesPerEpoch()) {  // end of an epoch
      if (last_eval_step != step) evalNow(pos.epoch + 1);
      progress.finish();
      if (rank == 0 && cfg.logging.progress)
        std::printf("epoch %lld: test accuracy %.2f %%, test loss %.4f\n", static_cast<long long>(pos.epoch + 1),
                    100.0 * last_eval.accuracy, last_eval.loss);
      loader.startEpoch(pos.epoch + 1);
      continue;
    }
    std::string phase = "ddp";
    if (ab) {
      phase = ab->beginStep(step);
      ++win_phases[phase];
      for (const auto& e : ab->takeEvents())
        if (jsonl) jsonl->write(withBytes(abEventJson(e, *ab)));
    }
    TraceScope step_span(&trace, phase, "phase", 2);
    const auto t0 = Clock::now();
    double step_loss = 0;
    data::Batch b;
    for (int64_t a = 0; a < accum; ++a) {
      loader.next(b);
      ddp().setSync(a == accum - 1);
      torch::Tensor loss;
      {
        TraceScope s(&trace, "forward", "compute", 0);
        AutocastScope amp(cfg.model.autocast == "bf16");
        loss = torch::nn::functional::cross_entropy(forward(b.x), b.y, label_opts) / static_cast<double>(accum);
      }
      {
        TraceScope s(&trace, "backward", "compute", 0);
        loss.backward();
      }
      step_loss += loss.item<double>();
    }
    const double wait_before = ddpStats().wait_s;
    ddp().finish();
    {
      TraceScope s(&trace, "optimizer", "compute", 0);
      if (cfg.optimizer.grad_clip > 0) torch::nn::utils::clip_grad_norm_(model->parameters(), cfg.optimizer.grad_clip);
      last_lr = ab ? ab->lr(step, schedule.at(step)) : schedule.at(step);
      for (auto& g : optimizer->param_groups()) g.options().set_lr(last_lr);
      optimizer->step();
      optimizer->zero_grad();
    }
    ++step;
    const double dt = since(t0), waited = ddpStats().wait_s - wait_before;
    win_loss += step_loss, win_time += dt, win_compute += dt - waited, total_compute += dt - waited;
    ++win_steps;
    if (step % cfg.logging.log_every == 0 || step == total) {
      const auto [sent, recv] = bytes();
      const double sps = static_cast<double>(win_steps * accum * cfg.data.batch_size * n) / std::max(win_time, 1e-9);
      if (jsonl) {
        const auto snap = world->meter().snapshot();
        nlohmann::json rec = {{"type", "step"}, {"step", step}, {"epoch", loader.position().epoch + 1},
                      {"loss", win_loss / win_steps}, {"lr", last_lr}, {"samples_per_s", sps},
                      {"compute_s", win_compute / win_steps}, {"comm_s", ddpStats().comm_s},
                      {"wait_s", (win_time - win_compute) / win_steps}, {"bytes_sent", sent}, {"bytes_recv", recv},
                      {"bytes_by_phase", phasesJson(snap)}, {"compression_ratio", ddp().hook().compressionRatio()},
                      {"time_s", since(t_start)}};
        if (ab) {
          rec["phase"] = phase;
          rec["phases"] = win_phases;
          rec["ab_model_size_fraction"] = ab->compression();
        }
        jsonl->write(rec);
      }
      win_phases.clear();
      char line[256];
      const double eta = (since(t_start) / std::max<int64_t>(1, step - state.step)) * static_cast<double>(total - step);
      std::snprintf(line, sizeof(line), "epoch %lld  step %lld/%lld  loss %.4f  lr %.4g  %.0f samples/s  sent %s  ETA %s",
                    static_cast<long long>(loader.position().epoch + 1), static_cast<long long>(step),
                    static_cast<long long>(total), win_loss / win_steps, schedule.at(step - 1), sps,
                    human(static_cast<double>(sent)).c_str(), duration(eta).c_str());
      progress.update(line);
      win_loss = win_compute = win_time = 0;
      win_steps = 0;
    }
    if (cfg.logging.eval_every > 0 && step % cfg.logging.eval_every == 0 && step < total &&
        loader.position().batch + accum <= loader.batchesPerEpoch()) {  // an epoch end evaluates anyway
      evalNow(loader.position().epoch + 1);
      progress.finish();
      if (rank == 0 && cfg.logging.progress)
        std::printf("step %lld: test accuracy %.2f %%, test loss %.4f\n", static_cast<long long>(step),
                    100.0 * last_eval.accuracy, last_eval.loss);
    }
    if (checkpoints.due(*world, step, since(t_run))) saveAt(step);
  }
  progress.finish();
  if (ab && ab->phase() == parallel::AbPhase::ab) {
    ab->finish(step);  // one full-rank model on every rank before the final evaluation
    for (const auto& e : ab->takeEvents())
      if (jsonl) jsonl->write(withBytes(abEventJson(e, *ab)));
    last_eval_step = -1;
  }
  if (last_eval_step != step) evalNow(loader.position().epoch + 1, /*final=*/true);
  const double wall = since(t_start);
  saveAt(step);
  if (rank == 0) savePythonStateDict((out_dir / "model_state.pt").string(), *model);
  if (!opts.timeline_path.empty()) writeTimeline(*world, trace, opts.timeline_path);

  // Summary: totals over ranks, the straggler (the rank that waited least: others waited for it).
  const auto [sent, recv] = bytes();
  const auto final_traffic = world->meter().snapshot();  // before the summary's own reductions
  const double total_sent = sumOver(*world, static_cast<double>(sent));
  // Summed over ranks, like bytes_sent; bytes_by_phase and bytes_by_phase_link are rank 0's.
  nlohmann::json linkTotals = linksJson(final_traffic);
  for (const char* link : {comm::kIntraNode, comm::kInterNode})
    linkTotals[link] = static_cast<int64_t>(sumOver(*world, linkTotals[link]["sent"].get<double>()));
  const auto st = ddpStats();
  std::vector<double> waits(n);
  double my_wait = st.wait_s;
  world->allgather(&my_wait, waits.data(), 1, comm::DType::f64);
  const int straggler = static_cast<int>(std::min_element(waits.begin(), waits.end()) - waits.begin());
  const int64_t samples = (step - state.step) * accum * cfg.data.batch_size * n;
  nlohmann::json summary = {
      {"strategy", cfg.strategy.name}, {"model", cfg.model.name}, {"dataset", cfg.data.dataset}, {"world", n},
      {"steps", step}, {"epochs", static_cast<double>(step) / static_cast<double>(per_epoch)}, {"wall_s", wall},
      {"test_accuracy", last_eval.accuracy}, {"test_loss", last_eval.loss},
      {"bytes_sent", static_cast<int64_t>(total_sent)}, {"bytes_sent_per_rank", static_cast<int64_t>(total_sent / n)},
      {"bytes_by_phase", phasesJson(final_traffic)},
      {"bytes_by_phase_link", phaseLinksJson(final_traffic)},
      {"bytes_sent_by_link", linkTotals},
      {"compression_ratio", ddp().hook().compressionRatio()},
      {"checkpoint", checkpointFile(ckpt_dir.string(), step, 0)},
      {"samples_per_s", static_cast<double>(samples) / std::max(1e-9, wall - state.elapsed_s)},
      {"comm_s", st.comm_s}, {"wait_s", st.wait_s}, {"compute_s", total_compute},
      {"comm_hidden_fraction", st.comm_s > 0 ? std::max(0.0, 1.0 - st.wait_s / st.comm_s) : 0.0},
      {"straggler_rank", straggler}, {"wait_s_by_rank", waits},
      {"parameters", nn::parameterCount(*model)}, {"buckets", ddp().buckets().size()},
      {"codec", cfg.compress.codec}, {"compression", compressionJson(compressors, cfg)}};
  summary["restarts"] = opts.restart_count;
  summary["resumes"] = rank == 0 ? resumeRecords((out_dir / "metrics.jsonl").string()) : nlohmann::json::array();
  if (ab) summary["ab"] = abSummaryJson(*ab);
  // AB-training rebuilds its DDP (and codec) at every switch: the ratio over the whole run is the
  // summed one, not the last hook's.
  if (!compressors.empty()) summary["compression_ratio"] = summary["compression"]["ratio"];
  if (rank == 0) {
    const std::string text = summary.dump(2) + "\n";
    writeFileAtomically((out_dir / "summary.json").string(), text);
    if (!opts.summary_path.empty()) writeFileAtomically(opts.summary_path, text);
  }
  return summary;
}

}  // namespace lowcomm::train
