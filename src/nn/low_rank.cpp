#include "lowcomm/nn/low_rank.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <tuple>

#include "lowcomm/base/error.h"
#include "lowcomm/nn/factor_layers.h"

namespace lowcomm::nn {
namespace {

// Module::parameters_ is protected; a pointer to it formed through a derived class is a legal way
// to reach the dictionary of any module (we need to remove "weight" and add "A"/"B").
struct ParamDict : torch::nn::Module {
  static torch::OrderedDict<std::string, torch::Tensor>& of(torch::nn::Module& m) {
    return m.*(&ParamDict::parameters_);
  }
};

void dropParam(torch::nn::Module& m, const std::string& name) {
  auto& dict = ParamDict::of(m);
  if (dict.contains(name)) dict.erase(name);
}

// FNV-1a: a layer's sketch seed depends on its name, not its index, so a pipeline stage (which
// holds some of the layers) draws what the whole model draws for the same layer.
uint64_t nameHash(const std::string& name) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

bool coveredBy(const std::string& path, const std::vector<std::string>& names) {
  for (const auto& n : names)
    if (path == n || path.rfind(n + ".", 0) == 0) return true;
  return false;
}

}  // namespace

const char* factorName(Factor f) { return f == Factor::A ? "A" : "B"; }

// One factorisable layer: the module and its `weight` member (what the layer's forward reads).
struct LowRankModel::Slot {
  std::shared_ptr<torch::nn::Module> module;
  torch::Tensor* weight = nullptr;
  torch::Tensor a, b;  // factor parameters while factorised
  FactorConv2dImpl* conv = nullptr;  // set when the layer can run from its factors
  FactorLinearImpl* linear = nullptr;
  FactorisableLinear* other = nullptr;  // a layer of another kind (tensor-parallel shards)
  int split_dim = -1;                   // other's split: -1 none, 0 rows, 1 columns
  int64_t parts = 1, index = 0;
  bool thin = false;  // running from its factors now (weight undefined)

  bool canThin() const { return (conv && conv->canFactor()) || linear || (other && other->canFactor()); }
  void setThin(bool on) {
    thin = on;
    if (conv) conv->setFactors(on ? a : torch::Tensor(), on ? b : torch::Tensor());
    if (linear) linear->setFactors(on ? a : torch::Tensor(), on ? b : torch::Tensor());
    if (other) other->setFactors(on ? a : torch::Tensor(), on ? b : torch::Tensor());
  }
};

// An SVD of a layer's weight, and what the weight was when it was taken: the tensors it was
// computed from and their version counters (bumped by every in-place update, e.g. optimizer steps).
struct LowRankModel::Svd {
  torch::Tensor u, s, vh;
  std::vector<std::pair<const void*, uint32_t>> stamp;
  bool randomized = false;  // the top triplets of a sketch, not the full decomposition
};

namespace {
std::vector<std::pair<const void*, uint32_t>> stampOf(const std::vector<torch::Tensor>& ts) {
  std::vector<std::pair<const void*, uint32_t>> out;
  for (const auto& t : ts) out.emplace_back(t.unsafeGetTensorImpl(), t._version());
  return out;
}
}  // namespace

// Randomized SVD (Halko, Martinsson & Tropp 2011, alg. 4.4 + 5.1): a k-column range of M from a
// Gaussian sketch with `power` subspace iterations, then the exact SVD of the small k x cols
// projection. The top singular triplets come out accurate; the generator is seeded per layer so
// every process gets the same factors from the same weights.
static std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> randomizedSvd(const torch::Tensor& m, int64_t k, int power,
                                                                      uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  const auto omega = at::randn({m.size(1), k}, gen, m.options());
  auto q = std::get<0>(torch::linalg_qr(m.mm(omega)));
  for (int it = 0; it < power; ++it) {
    q = std::get<0>(torch::linalg_qr(m.t().mm(q)));
    q = std::get<0>(torch::linalg_qr(m.mm(q)));
  }
  auto [ub, sv, vh] = torch::linalg::svd(q.t().mm(m), /*full_matrices=*/false, c10::nullopt);
  return {q.mm(ub), sv, vh};
}

LowRankModel::Svd LowRankModel::decompose(size_t i, int64_t at_least) {
  const auto& s = *slots_[i];
  const auto stamp = factorised_ ? stampOf({s.a, s.b}) : stampOf({*s.weight});
  if (svd_cache_.size() == slots_.size() && svd_cache_[i] && svd_cache_[i]->stamp == stamp &&
      (!svd_cache_[i]->randomized || svd_cache_[i]->s.size(0) > at_least))
    return *svd_cache_[i];
  if (svd_cache_.size() != slots_.size()) svd_cache_.assign(slots_.size(), nullptr);
  const auto m = matrix(i);
  const int64_t p = std::min(m.size(0), m.size(1));
  // After a factorisation at rank r the spectrum beyond r is (nearly) empty: sketch r + 8
  // columns when that is well below min(rows, cols).
  const int64_t k = randomized_svd_ && layers_[i].last_rank > 0 ? layers_[i].last_rank + 8 : p;
  Svd d;
  if (k <= p / 2 && k > at_least) {
    std::tie(d.u, d.s, d.vh) = randomizedSvd(m, k, /*power=*/2, svd_seed_ + 7919 * nameHash(layers_[i].name));
    d.randomized = true;
  } else {
    std::tie(d.u, d.s, d.vh) = torch::linalg::svd(m, /*full_matrices=*/false, c10::nullopt);
  }
  d.stamp = stamp;
  svd_cache_[i] = std::make_shared<Svd>(d);
  return d;
}

namespace {
struct Candidate {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  torch::Tensor* weight = nullptr;
  FactorisableLinear* other = nullptr;
};

// Every Conv2d / Linear / FactorisableLinear with a >= 2-D weight, in named_modules() order.
std::vector<Candidate> candidatesOf(Model& model) {
  std::vector<Candidate> out;
  for (const auto& m : model.named_modules("", /*include_self=*/false)) {
    Candidate c{m.key(), m.value()};
    if (auto* conv = m.value()->as<torch::nn::Conv2dImpl>()) c.weight = &conv->weight;
    else if (auto* lin = m.value()->as<torch::nn::LinearImpl>()) c.weight = &lin->weight;
    c.other = dynamic_cast<FactorisableLinear*>(m.value().get());
    if (c.other) c.weight = &c.other->factorWeight();
    if (c.weight && c.weight->defined() && c.weight->dim() >= 2) out.push_back(c);
  }
  return out;
}

// ab.full_rank_layers with "stem" / "head" standing for the first / last candidate in a model
// without a module of that name (a TorchScript model); ConfigError for a name that is no module.
std::vector<std::string> resolveFullRank(const Model& model, std::vector<std::string> names,
                                         const std::vector<Candidate>& candidates) {
  const auto paths = model.modulePaths();  // a pipeline stage holds only some of them
  for (auto& name : names) {
    if (std::find(paths.begin(), paths.end(), name) != paths.end()) continue;
    if (!candidates.empty() && (name == kStemName || name == kHeadName)) {
      name = name == kStemName ? candidates.front().name : candidates.back().name;
      continue;
    }
    std::string valid;
    for (const auto& path : paths)
      if (path.find('.') == std::string::npos) valid += (valid.empty() ? "" : ", ") + path;
    throw ConfigError("ab.full_rank_layers: '" + name + "' is not a layer of model '" + model.spec().name +
                      "' (top-level layers: " + valid + ")");
  }
  return names;
}
}  // namespace

LowRankModel::LowRankModel(std::shared_ptr<Model> model, std::vector<std::string> full_rank_layers, bool split_sigma,
                           bool factored_forward)
    : model_(std::move(model)), split_sigma_(split_sigma), factored_forward_(factored_forward) {
  LC_ENFORCE(model_, "LowRankModel needs a model");
  const auto candidates = candidatesOf(*model_);
  full_rank_ = resolveFullRank(*model_, std::move(full_rank_layers), candidates);
  for (const auto& c : candidates) {
    if (coveredBy(c.name, full_rank_)) continue;
    LowRankLayer layer;
    layer.name = c.name;
    layer.shape = c.weight->sizes().vec();
    layer.rows = layer.shape[0];
    layer.cols = c.weight->numel() / layer.rows;
    const int split_dim = c.other ? c.other->splitDim() : -1;  // the whole layer's shape
    if (split_dim == 0) layer.rows *= c.other->splitParts();
    if (split_dim == 1) layer.cols *= c.other->splitParts();
    layers_.push_back(layer);
    auto slot = std::make_shared<Slot>();
    slot->module = c.module;
    slot->weight = c.weight;
    slot->conv = dynamic_cast<FactorConv2dImpl*>(c.module.get());
    slot->linear = dynamic_cast<FactorLinearImpl*>(c.module.get());
    slot->other = c.other;
    if (split_dim >= 0) slot->split_dim = split_dim, slot->parts = c.other->splitParts(), slot->index = c.other->splitIndex();
    slots_.push_back(slot);
  }
}

torch::Tensor LowRankModel::forward(const torch::Tensor& x) {
  materialize();
  return model_->forward(x);
}

void LowRankModel::materialize() {
  if (!factorised_) return;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (!slots_[i]->thin) *slots_[i]->weight = slots_[i]->a.mm(slots_[i]->b).view(layers_[i].shape);
}

bool LowRankModel::thin(size_t i) const { return slots_.at(i)->thin; }

torch::Tensor LowRankModel::matrix(size_t i) const {
  LC_ENFORCE(i < layers_.size(), "low-rank layer index ", i, " out of range");
  torch::NoGradGuard no_grad;
  const auto& s = *slots_[i];
  const int64_t rows = layers_[i].shape[0];
  const auto part = factorised_ ? s.a.mm(s.b).detach() : s.weight->detach().reshape({rows, -1}).clone();
  return s.split_dim >= 0 ? s.other->gatherSplit(part) : part;
}

torch::Tensor LowRankModel::factorA(size_t i) const { return slots_.at(i)->a; }
torch::Tensor LowRankModel::factorB(size_t i) const { return slots_.at(i)->b; }

std::vector<int64_t> LowRankModel::fullRanks() const {
  std::vector<int64_t> r;
  for (const auto& l : layers_) r.push_back(std::min(l.rows, l.cols));
  return r;
}

std::vector<int64_t> LowRankModel::ranksAbove(double cutoff, const std::vector<bool>& which) {
  LC_ENFORCE(which.empty() || which.size() == layers_.size(), "ranksAbove: ", which.size(), " flags for ",
             layers_.size(), " layers");
  std::vector<int64_t> r;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!which.empty() && !which[i]) {
      r.push_back(0);
      continue;
    }
    auto d = decompose(i);
    int64_t kept = d.s.gt(cutoff * d.s[0].item<double>()).sum().item<int64_t>();
    if (d.randomized && kept >= d.s.size(0)) {  // the sketch may have cut the spectrum short
      d = decompose(i, d.s.size(0));
      kept = d.s.gt(cutoff * d.s[0].item<double>()).sum().item<int64_t>();
    }
    r.push_back(std::max<int64_t>(1, kept));
  }
  return r;
}

void LowRankModel::factorise(const std::vector<int64_t>& ranks, Factor trained) {
  factorise(ranks, std::vector<Factor>(layers_.size(), trained));
}

std::vector<Factor> LowRankModel::smallerFactors() const {
  std::vector<Factor> out;
  for (const auto& l : layers_) out.push_back(l.rows < l.cols ? Factor::A : Factor::B);
  return out;
}

void LowRankModel::factorise(const std::vector<int64_t>& ranks, const std::vector<Factor>& trained_each,
                             const std::vector<bool>& compute) {
  LC_ENFORCE(ranks.size() == layers_.size(), "factorise: ", ranks.size(), " ranks for ", layers_.size(), " layers");
  LC_ENFORCE(compute.empty() || compute.size() == layers_.size(), "factorise: ", compute.size(), " flags for ",
             layers_.size(), " layers");
  LC_ENFORCE(trained_each.size() == layers_.size(), "factorise: ", trained_each.size(), " factors for ",
             layers_.size(), " layers");
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto& s = *slots_[i];
    auto& layer = layers_[i];
    const Factor trained = trained_each[i];
    const int64_t r = std::clamp<int64_t>(ranks[i], 1, std::min(layer.rows, layer.cols));
    if (!compute.empty() && !compute[i]) {  // placeholders; the caller fills them in, then refreshWeights()
      installFactors(i, torch::zeros({s.split_dim == 0 ? layer.rows / s.parts : layer.rows, r}),
                     torch::zeros({r, s.split_dim == 1 ? layer.cols / s.parts : layer.cols}), trained);
      continue;
    }
    const Svd d = decompose(i, r - 1);  // a sketch only if it covers rank r
    auto u = d.u, sv = d.s, vh = d.vh;
    u = u.slice(1, 0, r);
    sv = sv.slice(0, 0, r);
    vh = vh.slice(0, 0, r);
    torch::Tensor a, b;
    if (split_sigma_) {
      const auto root = sv.sqrt();
      a = u * root.unsqueeze(0), b = root.unsqueeze(1) * vh;
    } else if (trained == Factor::A) {
      a = u * sv.unsqueeze(0), b = vh;
    } else {
      a = u, b = sv.unsqueeze(1) * vh;
    }
    if (s.split_dim == 0) a = a.narrow(0, s.index * (layer.rows / s.parts), layer.rows / s.parts);
    if (s.split_dim == 1) b = b.narrow(1, s.index * (layer.cols / s.parts), layer.cols / s.parts);
    installFactors(i, a, b, trained);
  }
  factorised_ = true;
  trained_each_ = trained_each;
  trained_ = trained_each.empty() ? Factor::B : trained_each.front();
  svd_cache_.clear();
}

void LowRankModel::installFactors(size_t i, const torch::Tensor& a, const torch::Tensor& b, Factor trained) {
  auto& s = *slots_[i];
  auto& layer = layers_[i];
  const int64_t r = a.size(1);
  dropParam(*s.module, "weight");
  dropParam(*s.module, "A");
  dropParam(*s.module, "B");
  s.a = s.module->register_parameter("A", a.contiguous(), trained == Factor::A);
  s.b = s.module->register_parameter("B", b.contiguous(), trained == Factor::B);
  layer.rank = r;
  layer.last_rank = r;
  // Two thin ops cost r(rows + cols) per input position against rows*cols for W itself.
  // A split layer always runs thin: from a materialised part A_r B its replicated factor would get
  // only this part's share of the gradient.
  s.setThin(s.split_dim >= 0 ||
            (factored_forward_ && s.canThin() && r * (layer.rows + layer.cols) < layer.rows * layer.cols));
  *s.weight = s.thin ? torch::Tensor() : s.a.mm(s.b).view(layer.shape);
}

bool LowRankModel::sketched(size_t i) const {
  return i < svd_cache_.size() && svd_cache_[i] && svd_cache_[i]->randomized;
}

void LowRankModel::setLastRanks(const std::vector<int64_t>& ranks) {
  LC_ENFORCE(ranks.size() == layers_.size(), "setLastRanks: ", ranks.size(), " ranks for ", layers_.size(), " layers");
  for (size_t i = 0; i < layers_.size(); ++i) layers_[i].last_rank = ranks[i];
}

void LowRankModel::refreshWeights() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (factorised_ && !slots_[i]->thin) *slots_[i]->weight = slots_[i]->a.mm(slots_[i]->b).view(layers_[i].shape);
  svd_cache_.clear();
}

void LowRankModel::merge() {
  if (!factorised_) return;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < layers_.size(); ++i) {
    auto& s = *slots_[i];
    torch::Tensor w = s.a.mm(s.b).view(layers_[i].shape).contiguous();
    s.setThin(false);
    dropParam(*s.module, "A");
    dropParam(*s.module, "B");
    s.a = s.b = torch::Tensor();
    *s.weight = s.module->register_parameter("weight", w, true);
    layers_[i].rank = 0;
  }
  factorised_ = false;
}

void LowRankModel::setTrained(Factor trained) {
  LC_ENFORCE(factorised_, "setTrained: the model is full-rank");
  for (auto& s : slots_) {
    s->a.set_requires_grad(trained == Factor::A);
    s->b.set_requires_grad(trained == Factor::B);
  }
  trained_ = trained;
  trained_each_.assign(layers_.size(), trained);
}

int64_t LowRankModel::currentParameters() const { return parameterCount(*model_); }

int64_t LowRankModel::fullRankParameters() const {
  int64_t n = currentParameters();
  if (factorised_)
    for (size_t i = 0; i < layers_.size(); ++i) {
      int64_t weight = 1;
      for (const auto d : layers_[i].shape) weight *= d;
      n += weight - slots_[i]->a.numel() - slots_[i]->b.numel();
    }
  return n;
}

int64_t LowRankModel::biasNumel(size_t i) const {
  const auto* bias = slots_.at(i)->module->named_parameters(/*recurse=*/false).find("bias");
  return bias && bias->defined() ? bias->numel() : 0;
}

// The denominator: fullRankParameters() without the biases of the factorisable layers.
double LowRankModel::referenceCompression() const {
  int64_t denominator = fullRankParameters();
  for (size_t i = 0; i < slots_.size(); ++i) denominator -= biasNumel(i);
  return static_cast<double>(currentParameters()) / static_cast<double>(denominator);
}

}  // namespace lowcomm::nn
