// Variable-length steps in the train loop (docs/varlen.md, "Running a step"): the process groups
// every step may use, the checks of a step's plan, and the pipeline stage that packs each
// micro-batch's documents for this rank's sequence group.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "weft/core/json.h"
#include "weft/runtime/comm.h"
#include "weft/runtime/data.h"
#include "weft/runtime/model.h"
#include "weft/runtime/optim.h"
#include "weft/runtime/pipeline_executor.h"
#include "weft/runtime/train.h"

namespace weft::runtime {

// Group sizes count sequence-parallel ranks ("units"): with the plan's tp, unit u is the tp
// consecutive ranks from u x tp, and a group of g units runs its all-to-alls between the g ranks of
// one tp index.

bool power_of_two(int x);

// The largest group size a variable-length run may use: the largest power of two that is at most
// the units and divides every layer's attention heads per tp rank (Ulysses moves whole heads).
int varlen_max_group(const Plan& plan, int world);

// Every sequence group of a run, built before the first step: for each power-of-two size from
// min_group to max_group, each aligned block of that many consecutive units, one group per tp index.
std::vector<std::vector<int>> varlen_groups(int world, int tp, int min_group, int max_group);

// Checks a step's plan against the run: every micro-batch's group sizes are allowed powers of two
// summing to the units, and every document of the batch runs exactly once. Errors name the step,
// the micro-batch and what is wrong.
Status check_varlen_step(const VarlenStep& s, int step, int units, int min_group, int max_group, int docs);

// A fingerprint of a step's plan (an all-reduce compares it between ranks before the step runs).
double varlen_fingerprint(const VarlenStep& s);

// The step's plan as the per-step JSON shows it: per micro-batch, each group's size and lengths.
Json varlen_step_json(const VarlenStep& s, const std::vector<std::int64_t>& lengths);

// The pipeline stage of a variable-length step (single-stage plans): micro-batch k of the step
// packs the documents of this rank's group into one sample (each document's tokens, its targets
// the next token in the same document, its last token counting nothing; padding to a multiple of
// the group size counting nothing), sets the group and the document ids on the model, and embeds
// this rank's block of the sequence.
class VarlenStage : public PipelineStage {
 public:
  VarlenStage(Model& m, Optimizer& opt, GroupSet& groups, const TokenSource& data, const DocumentBatches& batches);
  // The step to run next and its plan (checked); returns the tokens whose loss the step counts.
  std::int64_t set_step(int step, const VarlenStep& plan);
  int micro_batches() const { return static_cast<int>(parts_.size()); }
  const std::vector<std::int64_t>& lengths() const { return lengths_; }

  bool first_stage() const override { return true; }
  bool last_stage() const override { return true; }
  at::Tensor input(int k) override;
  at::Tensor input_buffer(int, int) override { return {}; }
  at::Tensor forward(const at::Tensor& x, int) override { return m_.forward_layers(x); }
  at::Tensor loss(const at::Tensor& y, int k) override;
  void begin_backward(bool last, int) override { opt_.begin_backward(last); }
  void end_backward() override { opt_.after_backward(); }

 private:
  struct Part {
    std::vector<int> ranks;          // this rank's group in the micro-batch
    std::vector<std::int64_t> docs;  // its documents (indices into the file's documents)
  };
  Model& m_;
  Optimizer& opt_;
  GroupSet& groups_;
  const TokenSource& data_;
  const DocumentBatches& batches_;
  std::vector<Part> parts_;
  std::vector<std::int64_t> lengths_;
  at::Tensor targets_;  // this rank's block of the current micro-batch's targets
};

}  // namespace weft::runtime
