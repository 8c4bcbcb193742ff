#include "weft/runtime/support.h"

#include <cstdlib>

#include "weft/core/format.h"
#include "weft/plan/runtime_support.h"

namespace weft::runtime {

// The rules live in the planner's plan library (weft/plan/runtime_support.h), where the search
// reads them too; runtime_supports() runs validate() first.
Status check_supported(const Plan& p) { return runtime_supports(p); }

DType run_precision(const Plan& p, const std::string& want, bool cuda) {
  if (want == "fp32") return DType::kFp32;
  if (want == "bf16") return DType::kBf16;
  return cuda && p.train.dtype == DType::kBf16 ? DType::kBf16 : DType::kFp32;  // auto
}

std::string precision_note(const Plan& p, const std::string& device, DType run) {
  const bool cpu = device == "cpu";
  const std::string where = cpu ? "cpu (Gloo)" : device == "cuda-gloo" ? "cuda (Gloo, through host memory)" : "cuda (NCCL)";
  const std::string what =
      run == DType::kFp32
          ? "parameters, activations, gradients and collectives in fp32 on " + where
          : "bf16 mixed precision on " + where +
                ": layers compute in bf16 from fp32 parameters; activations and their collectives in bf16" +
                (device == "cuda" ? "" : " (carried as fp32 by Gloo)") +
                "; gradients, their reduction, AdamW states and the loss in fp32";
  if (p.train.dtype == run) return "precision: " + what;
  std::string why = std::string("as --precision ") + to_string(run) + " asks";
  if (p.train.dtype == DType::kFp16 && run == DType::kFp32)
    why = "fp16 needs loss scaling, which this runtime does not have; bf16 (--precision bf16) needs none";
  else if (p.train.dtype == DType::kBf16 && run == DType::kFp32 && cpu)
    why = "bf16 matrix products on this CPU are slower than fp32 (--precision bf16 runs them anyway)";
  else if (p.train.dtype != DType::kBf16 && p.train.dtype != DType::kFp16 && run == DType::kFp32)
    why = "this runtime computes in fp32 or bf16";
  return std::string("train.dtype ") + to_string(p.train.dtype) + " runs as " + to_string(run) + ": " + what + "; " +
         why;
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
