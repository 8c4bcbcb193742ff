// `weft profile hardware` (one rank of a measuring job, under `weft launch -n N`) and
// `weft profile model` (one process). Thin: flags into the profiler's options.
#include <memory>

#include "commands.h"
#include "weft/profiler/profiler.h"

namespace weft::cli {

void register_profile_commands(CLI::App& app) {
  CLI::App* p = app.add_subcommand(
      "profile", "Measure this machine and a model's layers; the profiles feed `weft plan` / `weft estimate` "
                 "(--hardware-profile, --model-profile). docs/profiles.md describes both files.");
  p->require_subcommand(1);

  auto h = std::make_shared<profiler::HardwareOptions>();
  CLI::App* hw = p->add_subcommand(
      "hardware", "Time all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over every group size and "
                  "placement, the overlap and compute-sharing slow-downs. One process is one rank: run it as "
                  "`weft launch -n N -- weft profile hardware --out hw.json`.");
  hw->add_option("--out", h->out, "Hardware profile to write (rank 0 writes it)")->required();
  hw->add_option("--cluster-out", h->cluster_out, "Also write the measured machine as a weft cluster spec");
  hw->add_option("--gpus-per-node", h->gpus_per_node,
                 "Ranks per node (default: the ranks launched on this machine). Smaller values declare virtual "
                 "nodes on one machine so that groups spanning nodes are measured");
  hw->add_option("--min-bytes", h->min_bytes, "Smallest message per rank, bytes")->capture_default_str();
  hw->add_option("--max-bytes", h->max_bytes, "Largest message per rank, bytes")->capture_default_str();
  hw->add_option("--time-per-size", h->time_per_point_s, "Seconds spent timing each message size")
      ->capture_default_str();
  hw->add_option("--gap-ms", h->gap_ms,
                 "Milliseconds of compute before each timed call (as in training); 0: back-to-back calls")
      ->capture_default_str();
  hw->add_option("--threads", h->threads, "Intra-op threads per rank (as weft train --threads)")->capture_default_str();
  hw->add_option("--timeout", h->timeout_s, "Seconds after which a collective is declared stuck")->capture_default_str();
  hw->add_option("--progress", h->progress, "auto (a bar on a terminal), on or off")->capture_default_str();
  hw->add_option("--device", h->device,
                 "cpu (collectives through Gloo, as above) or cuda: GPU 0 alone, GEMM rate by shape, memory "
                 "bandwidth, launch overhead (one process; a CUDA build of PyTorch)")
      ->capture_default_str();
  hw->add_option("--slow", h->slow,
                 "RANK:FACTOR: that rank's per-rank speed workload counts FACTOR times as long (a test hook, as "
                 "weft train --slow)");
  hw->callback([h] {
    const Status s = profiler::profile_hardware(*h);
    if (!s.ok()) fail(s.error());
  });

  auto m = std::make_shared<profiler::ModelOptions>();
  CLI::App* md = p->add_subcommand(
      "model", "Time forward and backward and measure saved activations of the runtime's own layers, embedding and "
               "LM head for each tp degree, sequence length, micro-batch and recompute mode. One process.");
  md->add_option("--model", m->model, "Model preset, weft model JSON or HF config.json")->required();
  md->add_option("--out", m->out, "Model profile to write")->required();
  md->add_option("--tp", m->tp, "Tensor-parallel degrees, e.g. 1,2")->delimiter(',')->capture_default_str();
  md->add_option("--seq", m->seq, "Sequence lengths, e.g. 64,128")->delimiter(',')->capture_default_str();
  md->add_option("--micro-batch", m->micro_batch, "Micro-batch sizes (samples per rank), e.g. 1,2,4")
      ->delimiter(',')
      ->capture_default_str();
  md->add_option("--recompute", m->recompute, "Recompute modes: none, selective, full")
      ->delimiter(',')
      ->capture_default_str();
  md->add_option("--threads", m->threads, "Intra-op threads (as weft train --threads)")->capture_default_str();
  md->add_option("--device", m->device, "cpu or cuda (device 0; a CUDA build of PyTorch)")->capture_default_str();
  md->add_option("--dtype", m->dtype, "fp32 or bf16 (as weft train --precision bf16: fp32 parameters, bf16 compute; with --device cuda)")
      ->capture_default_str();
  md->add_option("--time-per-point", m->time_per_point_s, "Seconds spent timing each point")->capture_default_str();
  md->add_option("--memory-fraction", m->memory_fraction,
                 "Share of the available memory a point may use; larger points are skipped and recorded")
      ->capture_default_str();
  md->add_option("--progress", m->progress, "auto (a bar on a terminal), on or off")->capture_default_str();
  md->callback([m] {
    const Status s = profiler::profile_model(*m);
    if (!s.ok()) fail(s.error());
  });
}

}  // namespace weft::cli
