// The HTML page of `weft plan --tasks ... --report` for an encoder feeding an LLM
// (docs/multitask.md, "Optimus: encoder work in the LLM's bubbles"): the LLM's step on each pipeline
// device group over time with the encoder's forward and backward packed into its idle time, one
// chart per schedule (fine, coarse). Each group is two rows: the LLM's operations above, the
// encoder's work on one of its lanes below, drawn darker where it lies outside the LLM's idle time
// (before the LLM starts or after it ends). Independent of lib/multitask: the CLI fills these
// plain records.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft {

struct OptimusPictureEvent {
  int group = 0;                  // pipeline device group (row)
  double start_s = 0, end_s = 0;
  // "llm-forward", "llm-backward" (recompute and weight gradients too), "llm-other" (transfers,
  // the update), "encoder-fwd", "encoder-bwd", "encoder-optimizer".
  std::string kind;
  int micro_batch = -1;
  bool in_bubble = false;         // encoder work: inside the LLM's idle time
};

struct OptimusChart {
  std::string title;              // "fine: ..." / "coarse: ..."
  int groups = 0;
  double llm_start_s = 0, llm_end_s = 0;  // where the LLM's own step lies (marked)
  std::vector<OptimusPictureEvent> events;
};

struct OptimusReportInput {
  std::string title;              // the task file, GPUs
  std::vector<std::string> notes; // lines under the title (step times, Eff, layouts)
  std::vector<OptimusChart> charts;
};

// The whole page; an error naming the chart for an event on a group it does not have or ending
// before it starts.
Result<std::string> render_optimus_html(const OptimusReportInput& in);
// Written atomically (weft/core/json.h's write_text_file).
Status write_optimus_html(const std::string& path, const OptimusReportInput& in);

}  // namespace weft
