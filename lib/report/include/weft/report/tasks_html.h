// The HTML page of `weft plan --tasks ... --report` (docs/multitask.md): the waves of a multi-task
// plan as a Gantt chart of device groups over time (time across, the GPUs down; each piece a
// rectangle as tall as its GPUs and as long as its time, coloured by module, or, when the pieces
// say when they run, a rectangle for the forward and a paler one for the backward, where the step
// runs them), with the baselines beside it. Independent of lib/multitask: the CLI fills these
// plain records.
#pragma once

#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft {

struct TasksPicturePiece {
  std::string task, module;
  int gpus = 0, layers = 0;
  double time_s = 0;
  int first_rank = -1;  // its ranks [first_rank, first_rank + gpus); < 0: after the wave's previous piece
  // When it runs in the step, where known: its forward and its backward, each from its start for
  // its length (both < 0: unknown; the piece is drawn at its wave's start for time_s).
  double forward_s = -1, forward_len_s = 0, backward_s = -1, backward_len_s = 0;
};

struct TasksPictureWave {
  double start_s = 0, time_s = 0;
  std::vector<TasksPicturePiece> pieces;
};

struct TasksReportInput {
  std::string title;                  // the task file, GPUs
  std::vector<std::string> notes;     // lines under the title (step time, baselines, bound)
  int gpus = 0;
  std::vector<TasksPictureWave> waves;
};

// The whole page; an error naming the wave for one whose pieces use more GPUs than there are, or
// ranks outside them.
Result<std::string> render_tasks_html(const TasksReportInput& in);
// Written atomically (weft/core/json.h's write_text_file).
Status write_tasks_html(const std::string& path, const TasksReportInput& in);

}  // namespace weft
