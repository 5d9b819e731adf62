// Low-rank factorisation of a model's layers for AB-training (see docs/ab-training.md).
//
// Every Conv2d and Linear below the model whose module path is not listed in `full_rank_layers`
// (a listed name also covers everything below it, "stem" covers "stem.*") is a *factorisable
// layer*; so is a FactorisableLinear (factor_layers.h). In a model without a module named "stem"
// or "head" (a TorchScript model), those names stand for its first and its last such layer. Its weight W is viewed as a matrix rows x cols (conv: out x in*kh*kw) and, when
// factorised, replaced by two parameters named "<layer>.A" [rows x r] and "<layer>.B" [r x cols]
// with W = A*B. The layer's own `weight` member then holds A*B (reshaped), recomputed by
// materialize() (forward() calls it), so the model's unchanged forward code uses the factors and
// autograd reaches them. Only the trained factor requires grad; the other one is frozen.
// Factored forward: a layer registered as FactorConv2d / FactorLinear (factor_layers.h) whose rank
// makes r*(rows + cols) < rows*cols runs as two thin ops from A and B instead (its `weight` is
// then undefined and materialize() skips it), unless factored_forward is false.
// Split layers (FactorisableLinear with splitDim() >= 0, e.g. tensor-parallel shards): rows and
// cols are the whole layer's; matrix() and every decomposition gather the parts (a collective:
// the parts' processes call factorise/ranksAbove/matrix alike); the layer holds its part of one
// factor and all of the other, and always runs thin (whatever factored_forward says).
//
// Contract:
// - factorise(ranks, trained) takes an SVD W = U diag(S) Vh of every layer's current weight and
//   keeps the first ranks[i] singular triplets: with split_sigma A = U sqrt(S), B = sqrt(S) Vh;
//   without it the trained factor carries S. A rank is clamped to [1, min(rows, cols)].
//   Works from full-rank and from factorised state (then W = A*B first).
// - merge() turns every layer back into a full-rank `weight` parameter equal to A*B.
// - Parameter names change with the state; the order of named_parameters() is the same on every
//   rank that went through the same calls. Biases and all other parameters are untouched.
// - Nothing here communicates: choosing one rank for all processes is the caller's job.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "lowcomm/nn/models.h"

namespace lowcomm::nn {

enum class Factor { A, B };
const char* factorName(Factor f);  // "A" / "B"

struct LowRankLayer {
  std::string name;            // module path, e.g. "features.3" (parameters "<name>.A", "<name>.B")
  std::vector<int64_t> shape;  // full weight shape
  int64_t rows = 0, cols = 0;  // 2-D view of the weight
  int64_t rank = 0;            // factor rank while factorised, 0 while full-rank
  int64_t last_rank = 0;       // the rank of the latest factorisation (kept across merge())
};

class LowRankModel {
 public:
  // Throws ConfigError("ab.full_rank_layers: ...") for a listed name that is not a module path of
  // the model.
  LowRankModel(std::shared_ptr<Model> model, std::vector<std::string> full_rank_layers = {kStemName, kHeadName},
               bool split_sigma = true, bool factored_forward = true);

  // materialize() then the model's forward.
  torch::Tensor forward(const torch::Tensor& x);
  // Writes A*B into every factorised layer's `weight` member (with autograd history unless
  // grad mode is off). No-op while full-rank.
  void materialize();

  Model& model() { return *model_; }
  // full_rank_layers with "stem" / "head" resolved (see above).
  const std::vector<std::string>& fullRankLayers() const { return full_rank_; }
  std::shared_ptr<Model> shared() const { return model_; }
  const std::vector<LowRankLayer>& layers() const { return layers_; }
  bool factorised() const { return factorised_; }
  Factor trained() const { return trained_; }
  bool splitSigma() const { return split_sigma_; }
  // Whether layer i runs from its factors (factored forward) right now.
  bool thin(size_t i) const;

  void factorise(const std::vector<int64_t>& ranks, Factor trained);
  // The same with a trained factor per layer (trained[i] for layer i). With `compute` given, only
  // layers with compute[i] are decomposed; the others get zero factors of rank ranks[i] for the
  // caller to fill (e.g. broadcast from the process that decomposed them), then refreshWeights().
  void factorise(const std::vector<int64_t>& ranks, const std::vector<Factor>& trained,
                 const std::vector<bool>& compute = {});
  // Recomputes the weight members of non-thin layers from their factors (after filling them in).
  void refreshWeights();
  // Randomized SVD (Halko et al.) once a layer has been factorised at rank r: the next
  // decomposition (factorised, or merged and trained on) sketches r + 8 directions with 2 power
  // iterations when that is at most half of min(rows, cols), instead of a full SVD; ranksAbove
  // falls back to the exact SVD when every sketched value passes the cutoff. Approximate: the
  // sketch's smaller values can sit slightly below the true ones. Seeded, so equal weights give
  // equal factors in every process.
  void setRandomizedSvd(bool on, uint64_t seed = 0) { randomized_svd_ = on, svd_seed_ = seed; }
  // Whether layer i's cached decomposition (from ranksAbove/factorise) is a randomized sketch.
  bool sketched(size_t i) const;
  // Restores every layer's last_rank (a checkpoint of a merged model), so the next
  // decomposition is the same as in the run that wrote it.
  void setLastRanks(const std::vector<int64_t>& ranks);
  // Per layer, the factor with fewer parameters: A [rows x r] when rows < cols, else B.
  std::vector<Factor> smallerFactors() const;
  // The trained factor of layer i (factorised state).
  Factor trainedOf(size_t i) const { return trained_each_.at(i); }
  void merge();
  // Changes which factor requires grad (factorised state only).
  void setTrained(Factor trained);

  // min(rows, cols) per layer: the rank of an untruncated SVD.
  std::vector<int64_t> fullRanks() const;
  // Per layer: how many singular values of the current W (or A*B) are > cutoff * s_max (>= 1).
  // Keeps the decomposition, so a factorise() before the weights change reuses it. With `which`,
  // only those layers are decomposed (0 for the others).
  std::vector<int64_t> ranksAbove(double cutoff, const std::vector<bool>& which = {});
  // Current weight of layer i as a detached rows x cols matrix (A*B while factorised).
  torch::Tensor matrix(size_t i) const;
  // Factor parameters of layer i (undefined while full-rank).
  torch::Tensor factorA(size_t i) const;
  torch::Tensor factorB(size_t i) const;

  // Parameter counts of this process's model: every layer full rank, and the current state (A
  // and B counted for factorised layers; a split layer's part and the factors it holds). Their
  // ratio is the AB-training compression metric of an unsplit model.
  int64_t fullRankParameters() const;
  int64_t currentParameters() const;
  // The AB-training reference's compression (get_network_compression): current parameters
  // (factorised layers: bias + A + B) over full-rank parameters where a factorised layer counts
  // its weight only, not its bias. Every other parameter counts on both sides.
  double referenceCompression() const;
  // Layer i's bias elements in this process (0 without a bias).
  int64_t biasNumel(size_t i) const;

 private:
  struct Slot;
  struct Svd;
  // The cached SVD of layer i if its weights did not change since; a randomized sketch only when
  // it holds more than `at_least` singular values.
  Svd decompose(size_t i, int64_t at_least = 0);
  void installFactors(size_t i, const torch::Tensor& a, const torch::Tensor& b, Factor trained);
  bool randomized_svd_ = false;
  uint64_t svd_seed_ = 0;
  std::shared_ptr<Model> model_;
  std::vector<std::string> full_rank_;
  bool split_sigma_;
  bool factored_forward_;
  bool factorised_ = false;
  Factor trained_ = Factor::B;       // of the first layer (every layer's unless per-layer)
  std::vector<Factor> trained_each_;
  std::vector<LowRankLayer> layers_;
  std::vector<std::shared_ptr<Slot>> slots_;
  std::vector<std::shared_ptr<Svd>> svd_cache_;
};

}  // namespace lowcomm::nn
