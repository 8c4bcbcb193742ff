// The HTML page of `weft varlen --report` (docs/varlen.md): per planned step a picture of its
// micro-batches, each a band whose width is the GPUs and whose height is time, with every
// sequence-parallel group a column as wide as its GPUs and its documents stacked in it by their
// times. Independent of lib/varlen: the CLI fills these plain records.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft {

struct VarlenPictureGroup {
  int size = 0;                        // GPUs
  double overhead_s = 0;               // the group's fixed time per micro-batch
  std::vector<std::int64_t> lengths;   // its documents, longest first
  std::vector<double> times_s;         // each document's time on the group
};

struct VarlenPictureStep {
  int step = 0;
  double weft_s = 0, static_s = 0, adaptive_s = 0, plan_ms = 0;
  std::vector<std::vector<VarlenPictureGroup>> micro_batches;
};

struct VarlenReportInput {
  std::string title;                   // model, GPUs, cost model
  std::vector<std::string> notes;      // lines under the title (baselines, totals)
  int gpus = 0;
  std::vector<VarlenPictureStep> steps;
};

// The whole page; an error for a step whose groups do not use every GPU.
Result<std::string> render_varlen_html(const VarlenReportInput& in);
// Written atomically (weft/core/json.h's write_text_file).
Status write_varlen_html(const std::string& path, const VarlenReportInput& in);

}  // namespace weft
