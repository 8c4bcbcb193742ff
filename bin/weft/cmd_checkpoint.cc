// `weft checkpoint inspect DIR` (what a sharded checkpoint holds) and `weft checkpoint convert DIR
// --plan P --out OUT` (the same state written for another plan, offline). Thin: flags into
// weft/runtime/checkpoint.h.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "weft/runtime/checkpoint.h"

namespace weft::cli {

namespace {
struct CheckpointArgs {
  std::string dir, plan, out;
  int step = -1;
};
}  // namespace

void register_checkpoint_commands(CLI::App& app) {
  CLI::App* c = app.add_subcommand(
      "checkpoint", "Read and re-shard the sharded checkpoints of `weft train --checkpoint-dir` (docs/runtime.md)");
  c->require_subcommand(1);
  auto a = std::make_shared<CheckpointArgs>();

  CLI::App* in = c->add_subcommand(
      "inspect", "Print what a checkpoint holds: step, the plan and world size that wrote it, each rank file, each "
                 "tensor and the ranks holding it; exits non-zero if a file is missing or does not match the index");
  in->add_option("dir", a->dir, "Checkpoint directory (--checkpoint-dir of the run)")->required();
  in->add_option("--step", a->step, "A step other than the latest");
  in->callback([a] {
    const std::string text = unwrap(runtime::inspect_checkpoint(a->dir, a->step));
    std::fputs(text.c_str(), stdout);
  });

  CLI::App* cv = c->add_subcommand(
      "convert", "Write a checkpoint for another plan or world size (what `weft train --resume` under that plan "
                 "does on its own, done once, offline)");
  cv->add_option("dir", a->dir, "Checkpoint directory to read")->required();
  cv->add_option("--plan", a->plan, "The plan to write it for (weft plan --out)")->required();
  cv->add_option("--out", a->out, "Checkpoint directory to write (its `latest` names the step)")->required();
  cv->add_option("--step", a->step, "A step other than the latest");
  cv->callback([a] {
    const Plan p = unwrap(read_plan_file(a->plan));
    check(validate(p));
    check(runtime::convert_checkpoint(a->dir, a->step, p, a->out, [&](int r) {
      std::fprintf(stderr, "\rweft checkpoint convert: rank %d of %d", r + 1, p.world_size());
      if (r + 1 == p.world_size()) std::fputc('\n', stderr);
    }));
    std::printf("wrote %s for %d ranks under %s\n", a->out.c_str(), p.world_size(), a->plan.c_str());
  });
}

}  // namespace weft::cli
