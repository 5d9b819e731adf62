// In-memory data sets: image classification (Fashion-MNIST from gzip idx, CIFAR-10 binary batches,
// a seeded synthetic set) and byte-level language modelling (a directory of text files).
//
// Contract for every image loader: images are float32 [N, C, H, W], contiguous, already
// normalised per channel as (pixel/255 - mean[c]) / stdev[c]; labels are int64 [N] with values in
// [0, classes). For language modelling (task language_model) `images` holds int64 [N, T] input
// tokens and `labels` int64 [N, T] the next token of each position, both in [0, classes).
// A missing, truncated or corrupt file throws lowcomm::DataError whose message names the file and
// the defect; bad arguments (unknown name, non-positive sizes) throw lowcomm::ConfigError.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace lowcomm::data {

// Per-channel normalisation on the [0, 1] pixel scale.
struct Normalization {
  std::vector<float> mean;
  std::vector<float> stdev;
};

// Fashion-MNIST training-set statistics.
inline const Normalization kFashionMnistNorm{{0.2860f}, {0.3530f}};
// CIFAR-10 training-set statistics (population std, not the often-copied 0.2023/0.1994/0.2010).
inline const Normalization kCifar10Norm{{0.4914f, 0.4822f, 0.4465f}, {0.2470f, 0.2435f, 0.2616f}};
// Where Debian's dataset-fashion-mnist package installs the files.
inline const std::string kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";

enum class Task { classification, language_model };

struct Dataset {
  torch::Tensor images;  // float32 [N, C, H, W], normalised with `norm`; language_model: int64 [N, T] tokens
  torch::Tensor labels;  // int64 [N]; language_model: int64 [N, T] next tokens
  int classes = 0;       // language_model: the vocabulary (256 byte values)
  std::string name;
  Task task = Task::classification;
  Normalization norm;  // what was applied at load; a raw pixel value 0 maps to -mean/stdev

  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
  // Image geometry (classification only).
  int64_t channels() const { return images.size(1); }
  int64_t height() const { return images.size(2); }
  int64_t width() const { return images.size(3); }
  // Tokens per sample (language_model only).
  int64_t seqLen() const { return images.size(1); }
  // The first min(n, size()) samples, sharing storage (for quick runs and tests).
  Dataset take(int64_t n) const;
  // Normalised value of a black (raw 0) pixel per channel: the fill for zero padding.
  std::vector<float> blackValue() const;
};

// uint8 [N, C, H, W] pixels -> contiguous float32 (x/255 - mean[c]) / stdev[c].
// `norm` must have C entries in each vector and positive stdev.
torch::Tensor normalizeImages(const torch::Tensor& pixels, const Normalization& norm);

// Reads <dir>/{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz (the uncompressed names are used
// when the .gz is absent). Checks: idx magic (0x803 images, 0x801 labels), 28x28 images, image
// count == label count, payload length exactly as the header declares, labels < 10.
Dataset loadFashionMnist(const std::string& dir, bool train);

// Reads <dir>/data_batch_{1..5}.bin (train) or <dir>/test_batch.bin (test); `dir` may also be
// the parent of the tarball's cifar-10-batches-bin/. Each record is 1 label byte + 3072 pixel
// bytes (R, G, B planes of 32x32). Checks: file size a non-zero multiple of 3073, labels < 10.
Dataset loadCifar10(const std::string& dir, bool train);

// Seeded Gaussian classes: class k has a smooth random mean image M_k (drawn from `seed` only),
// each sample is M_k + N(0, 1) noise with k uniform. `split` selects an independent sample
// stream with the same class means (0 = train, 1 = test), so a model fit on one split
// generalises to the other. Learnable to near-perfect accuracy, but not in a single step.
// Deterministic for fixed arguments. Normalisation recorded as mean 0, stdev 1 (identity).
Dataset makeSynthetic(int64_t n, int channels, int height, int width, int classes, uint64_t seed,
                      uint64_t split = 0);

// The files of a text corpus: regular files under `dir` (recursively) whose path relative to
// `dir` matches the shell pattern `glob` (fnmatch with FNM_PATHNAME: "*.py" takes the top level
// only, "*/*.py" one level down), sorted. ConfigError for an empty dir or glob, DataError for a
// directory that cannot be read.
std::vector<std::string> textCorpusFiles(const std::string& dir, const std::string& glob);

// Byte-level language-modelling data (task language_model, 256 classes) from the files of
// textCorpusFiles(dir, glob), split by file: every 10th file in sorted order (with fewer than 10
// files, the last one) is the validation split (train = false), the others are training data.
// The split's files are concatenated (gzip files decompressed) and cut into non-overlapping
// windows: sample i is bytes [i T, (i+1) T) as inputs and the same shifted by one as targets.
// DataError when fewer than 2 files match or a split holds less than T + 1 bytes.
Dataset loadTextCorpus(const std::string& dir, const std::string& glob, bool train, int64_t seq_len);

// What only the text data set reads.
struct TextOptions {
  std::string glob = "*";
  int64_t seq_len = 128;
};

// Registry front end. Names: "fashion-mnist", "cifar10", "synthetic" (10 classes, 1x28x28,
// 8192 train / 2048 test samples; `dir` ignored), "text" (loadTextCorpus with `text`). Empty `dir`
// means the data set's default (Fashion-MNIST: kFashionMnistDefaultDir; CIFAR-10 and text have
// none and throw ConfigError). Unknown name -> ConfigError listing the valid names. `seed` only
// affects "synthetic".
Dataset loadDataset(const std::string& name, const std::string& dir, bool train, uint64_t seed,
                    const TextOptions& text = {});
std::vector<std::string> datasetNames();

}  // namespace lowcomm::data
