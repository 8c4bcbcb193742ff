#include "reporter.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace weft::runtime {

Reporter::Reporter(const TrainOptions& o, int total, bool active) : o_(o), total_(total), active_(active) {
  bar_ = active && o.format == "text" && (o.progress == "on" || (o.progress == "auto" && isatty(STDOUT_FILENO)));
  every_ = o.log_every > 0 ? o.log_every : bar_ ? std::max(1, total / 10) : 1;
}

void Reporter::line(const std::string& s) {
  if (!active_) return;
  clear_bar();
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

void Reporter::note(const std::string& s) {
  if (!active_) return;
  if (o_.format == "json") {
    std::fprintf(stderr, "%s\n", s.c_str());
    std::fflush(stderr);
    return;
  }
  line(s);
}

void Reporter::step(const StepStats& s) {
  if (!active_) return;
  if (o_.format == "json") {
    Json j{{"step", s.step},           {"loss", s.loss},
           {"grad_norm", s.grad_norm}, {"lr", s.lr},
           {"tokens_per_s", s.tokens_per_s}, {"step_time_s", s.step_time_s}};
    if (s.extra.is_object()) j.update(s.extra);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
    return;
  }
  if (s.step % every_ == 0 || s.step == total_ || s.step == 1) {
    char b[256];
    std::snprintf(b, sizeof b, "step %*d/%d  loss %.4f  grad_norm %.3f  lr %.2e  %.0f tokens/s  %.3f s/step",
                  static_cast<int>(std::to_string(total_).size()), s.step, total_, s.loss, s.grad_norm, s.lr,
                  s.tokens_per_s, s.step_time_s);
    line(std::string(b) + s.text_tail);
  }
  if (bar_) draw_bar(s);
}

void Reporter::summary(const Json& j) {
  if (!active_) return;
  clear_bar();
  if (o_.format == "json") {
    std::printf("%s\n", j.dump().c_str());
  } else {
    char b[256];
    std::snprintf(b, sizeof b, "done: %d steps, final loss %.4f, %.0f tokens/s, %.3f s/step, %.1f s total",
                  j.value("steps", 0), j.value("final_loss", 0.0), j.value("mean_tokens_per_s", 0.0),
                  j.value("mean_step_time_s", 0.0), j.value("total_time_s", 0.0));
    std::printf("%s\n", b);
  }
  std::fflush(stdout);
}

void Reporter::draw_bar(const StepStats& s) {
  const int width = 30;
  const int filled = total_ > 0 ? width * s.step / total_ : width;
  std::string bar(filled, '#');
  bar.resize(width, '.');
  std::printf("\r[%s] %d/%d loss %.4f %.0f tok/s", bar.c_str(), s.step, total_, s.loss, s.tokens_per_s);
  std::fflush(stdout);
  drawn_ = true;
}

void Reporter::clear_bar() {
  if (drawn_) std::printf("\r\033[K");
  drawn_ = false;
}

}  // namespace weft::runtime
