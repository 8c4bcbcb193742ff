// What rank 0 prints while training (docs/runtime.md "Output"): the text lines or JSON objects of
// the steps, the progress bar on a terminal, and the summary. Every call is a no-op on a Reporter
// that is not active (the other ranks). Not thread-safe: the main thread only.
#pragma once

#include "weft/core/json.h"
#include "weft/runtime/train.h"

namespace weft::runtime {

struct StepStats {
  int step = 0;
  double loss = 0, grad_norm = 0, lr = 0, tokens_per_s = 0, step_time_s = 0;
  Json extra;            // more fields of the step's JSON object (variable-length steps)
  std::string text_tail; // appended to the step's text line
};

class Reporter {
 public:
  // `total`: the last step of the run. o.format, o.progress and o.log_every choose what is shown;
  // `o` must outlive the Reporter.
  Reporter(const TrainOptions& o, int total, bool active);
  // One line of text on stdout (clearing the progress bar first).
  void line(const std::string& s);
  // A notice while training: on stdout with --format text, on stderr with json (stdout stays JSON).
  void note(const std::string& s);
  // After each step: a JSON object (--format json), or a text line on the first, the last and
  // every log_every-th step, and the progress bar.
  void step(const StepStats& s);
  // The summary object (--format json) or one "done: ..." line, read from the fields steps,
  // final_loss, mean_tokens_per_s, mean_step_time_s and total_time_s.
  void summary(const Json& j);

 private:
  void draw_bar(const StepStats& s);
  void clear_bar();
  const TrainOptions& o_;
  int total_;
  bool active_, bar_ = false, drawn_ = false;
  int every_ = 1;
};

}  // namespace weft::runtime
