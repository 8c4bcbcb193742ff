#include "weft/runtime/support.h"

#include <cstdlib>

namespace weft::runtime {

namespace {

std::string S(long long x) { return std::to_string(x); }

Status check_strategy(const std::string& where, const LayerStrategy& s) {
  if (s.cp > 1)
    return Error{ErrorKind::kBadInput, where + ".cp: context parallelism (cp=" + S(s.cp) +
                                           ") is not supported by the weft runtime yet; "
                                           "use a plan without it (ulysses is supported)"};
  if (s.ep > 1)
    return Error{ErrorKind::kBadInput,
                 where + ".ep: expert parallelism (ep=" + S(s.ep) + ") is not supported by the weft runtime yet"};
  return {};
}

}  // namespace

Status check_supported(const Plan& p) {
  Status v = validate(p);
  if (!v.ok()) return v.error().with_context("plan");
  if (p.train.schedule == Schedule::kInterleaved || p.train.vp > 1)
    return Error{ErrorKind::kBadInput, "plan: train.schedule: the interleaved schedule (vp=" + S(p.train.vp) +
                                           ") is not supported by the weft runtime yet; use gpipe or 1f1b"};
  if (p.model.position == PositionKind::kRelative)
    return Error{ErrorKind::kBadInput, "plan: model.position: relative position biases are not supported by the "
                                       "weft runtime (learned and rope are)"};
  for (int i = 0; i < p.model.num_layers(); ++i) {
    const LayerShape& sh = p.model.layer(i);
    const std::string where = "plan: model layer " + S(i);
    if (sh.kind != LayerKind::kDecoder)
      return Error{ErrorKind::kBadInput, where + ": " + to_string(sh.kind) +
                                             " layers are not supported by the weft runtime (decoder layers are)"};
    if (sh.moe.enabled())
      return Error{ErrorKind::kBadInput, where + ": MoE layers (" + S(sh.moe.experts) +
                                             " experts) are not supported by the weft runtime yet"};
    if (sh.hidden != p.model.hidden)
      return Error{ErrorKind::kBadInput, where + ": hidden " + S(sh.hidden) + " differs from the model's hidden " +
                                             S(p.model.hidden) + "; the runtime needs one width"};
  }
  if (Status s = check_strategy("plan: embedding", p.embedding); !s.ok()) return s;
  for (size_t s = 0; s < p.stages.size(); ++s)
    for (size_t l = 0; l < p.stages[s].layers.size(); ++l) {
      Status st = check_strategy("plan: stages[" + S(s) + "].layers[" + S(l) + "]", p.stages[s].layers[l]);
      if (!st.ok()) return st;
    }
  return {};
}

std::string precision_note(const Plan& p, const std::string& device) {
  const std::string what = "parameters, activations, gradients and collectives in fp32 on " + device +
                           (device == "cpu" ? " (Gloo)" : " (NCCL)");
  if (p.train.dtype == DType::kFp32) return "precision: " + what;
  return std::string("train.dtype ") + to_string(p.train.dtype) + " runs in fp32: " + what + "; " +
         (device == "cpu" ? "Gloo has no bf16 and this CPU build computes in fp32"
                          : "mixed precision is not implemented") +
         "; master weights and Adam states are fp32 as planned";
}

namespace {

// Reads the first variable of `names` that is set; returns false if none is.
bool get_env(std::initializer_list<const char*> names, std::string& value, std::string& which) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n); v && *v) {
      value = v;
      which = n;
      return true;
    }
  }
  return false;
}

int parse_int(const std::string& name, const std::string& v, int lo, int hi) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  require(end && *end == '\0' && !v.empty(), name + ": expected an integer, got \"" + v + "\"");
  require(x >= lo && x <= hi, name + ": " + v + " is out of range [" + S(lo) + ", " + S(hi) + "]");
  return static_cast<int>(x);
}

}  // namespace

Result<DistEnv> read_dist_env() {
  return catch_errors([]() -> Result<DistEnv> {
    DistEnv e;
    std::string v, n;
    if (get_env({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"}, v, n)) e.world = parse_int(n, v, 1, 1 << 20);
    if (get_env({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}, v, n)) e.rank = parse_int(n, v, 0, e.world - 1);
    else if (e.world > 1) throw InputError(n + "=" + S(e.world) + " but RANK is not set");
    if (get_env({"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}, v, n))
      e.local_rank = parse_int(n, v, 0, 1 << 20);
    else
      e.local_rank = e.rank;
    if (get_env({"MASTER_ADDR"}, v, n)) e.master_addr = v;
    if (get_env({"MASTER_PORT"}, v, n)) e.master_port = parse_int(n, v, 1, 65535);
    return e;
  });
}

}  // namespace weft::runtime
