// ZeRO stages 1 and 2 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", 2020) on data parallelism: `strategy.name = "ddp"` with `strategy.zero`.
//
// Contract:
// - Buckets as DataParallel's (reverse registration order, at most `bucket_bytes`), each padded
//   with zeros to a multiple of the world size and cut into world-size equal blocks: rank r owns
//   block r of every bucket. Its shard of the parameters is one f32 tensor per bucket, and the
//   optimizer (the trainer's, rebound: it must have one parameter group and no state yet) steps
//   only those shards, so optimizer state is 1/world of DDP's (plus padding).
// - A synchronised backward reduce-scatters each bucket (average, overlapped with backward like
//   DDP's allreduce) into the rank's shard gradient; gradient clipping uses the global norm over
//   all shards (one 16-byte allreduce, phase "clip"; on a model-parallel grid, ctx.shard set, also
//   over its tensor- and pipeline-parallel shards, replicated parameters counted once); after the optimizer step every bucket's
//   shards are allgathered into the model's parameters (phase "params"). Bytes on the wire equal
//   DDP's ring allreduce (reduce-scatter + allgather) up to padding.
// - Stage 1 keeps every parameter's .grad and the bucket buffers between steps (as DDP does);
//   stage 2 releases each .grad as soon as it is copied into its bucket and each bucket's buffer
//   as soon as it is reduced, so between steps only the shard gradients remain. Micro-batches
//   that do not synchronise accumulate into .grad in both stages (like FSDP's no_sync).
// - The result equals DDP's for the same seed and batch up to float rounding (the sums are
//   reduced in another order; tests/cli/zero_e2e.sh states the tolerance). Gradient codecs do
//   not apply (the config rejects compress.codec with strategy.zero).
// - Every rank holds the full model between steps: evaluation, checkpoints (each rank's file
//   holds its own optimizer shard) and model_state.pt work as for DDP.
#pragma once

#include <memory>

#include "lowcomm/parallel/strategy.h"

namespace lowcomm::parallel {

// stage: 1 (optimizer state sharded) or 2 (and gradients).
std::unique_ptr<Strategy> makeZeroStrategy(const StrategyContext& ctx, int stage);

}  // namespace lowcomm::parallel
