// `weft train --tasks FILE [--plan P]`: a multi-task model's waves (weft/plan/wave_plan.h) on the
// ranks of the job (docs/multitask.md, "Running the waves"). Each piece runs its operator's layers
// data parallel over its ranks (consecutive shares of the task's batch, rank_of_sample); the
// activations that cross between pieces go by point-to-point sends and their gradients return the
// same way; every parameter lives only on the ranks that use it and its gradient is summed over
// exactly those ranks (one process group per distinct rank set, built up front). fp32 on the CPU.
//
// The model of a module: a table of `vocab` rows (its input ids; tied to its head unless the module
// says otherwise), learned positions, pre-norm layers (LayerNorm or RMSNorm, multi-head attention
// with grouped key/value heads, causal in decoders and bidirectional in encoders, a GELU or SwiGLU
// FFN, biases as the shape says), a final norm. A module another flows into adds, to its first
// positions, the source's output through a projection it holds (one per source). A task's loss is
// the mean token cross-entropy of each module that flows nowhere within the task (its head against
// its next input ids), summed over those modules; a "contrastive" task (CLIP's) instead pairs the
// two modules that flow nowhere within it: each sample's first position, after the final norm,
// through a projection of the task's to the smaller of the two widths, L2-normalised; the loss is
// the mean of the cross-entropies of the batch's similarity matrix, scaled by exp of a learned
// temperature (initialised at ln(1/0.07), Radford et al. 2021), along its rows and its columns,
// sample i of one module matching sample i of the other. The step's objective sums the tasks'
// losses.
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "train_setup.h"
#include "weft/core/format.h"
#include "weft/plan/wave_plan.h"
#include "weft/runtime/comm.h"
#include "weft/runtime/params_file.h"
#include "weft/runtime/train.h"

namespace weft::runtime {

using multitask::Flow;
using multitask::Module;
using multitask::Task;
using multitask::TaskSpec;

namespace {

uint64_t fnv(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The modules a task runs that flow into none of its others.
std::vector<const Module*> sinks_of(const TaskSpec& t, const Task& task) {
  std::vector<const Module*> out;
  for (const std::string& name : task.modules) {
    bool flows = false;
    for (const Flow& f : t.flows) flows = flows || (f.from == name && task.runs(f.to));
    if (!flows) out.push_back(&t.module(name));
  }
  return out;
}

// The width of a contrastive task's embeddings: the smaller of its two sinks' hidden sizes.
int64_t embed_width(const std::vector<const Module*>& sinks) {
  return std::min(sinks[0]->model.hidden, sinks[1]->model.hidden);
}

// A contrastive task's own parameters: "task.<task>.<what>" (what: "<module>.proj", "logit_scale").
std::string task_param(const Task& task, const std::string& what) { return "task." + task.name + "." + what; }

// What this runtime runs of a task file; errors name the task or module.
Status check_runnable(const TaskSpec& t) {
  for (const Module& m : t.modules) {
    const ModelSpec& s = m.model;
    auto bad = [&](const std::string& what) -> Status {
      return Error{ErrorKind::kBadInput, "module \"" + m.name + "\": " + what + " is not run by weft train --tasks"};
    };
    if (s.position != PositionKind::kLearned) return bad("a position encoding other than learned positions");
    if (m.tokens > s.max_seq && s.max_seq > 0 && m.shares.empty())
      return bad("tokens " + std::to_string(m.tokens) + " beyond its positions (" + std::to_string(s.max_seq) + ")");
    for (int l = 0; l < s.num_layers(); ++l) {
      const LayerShape& L = s.layer(l);
      if (L.moe.experts > 0) return bad("a MoE layer");
      if (L.kind != LayerKind::kEncoder && L.kind != LayerKind::kDecoder) return bad("a cross-attention layer");
      if (L.hidden != s.hidden) return bad("a layer whose hidden size differs from the module's");
    }
    if (!m.shares.empty() && t.module(m.shares).tokens < m.tokens)
      return bad("tokens " + std::to_string(m.tokens) + " beyond the positions of \"" + m.shares + "\" (" +
                 std::to_string(t.module(m.shares).tokens) + ")");
  }
  for (const Task& task : t.tasks) {
    if (task.loss == "contrastive") {
      const size_t n = sinks_of(t, task).size();
      if (n != 2)
        return Error{ErrorKind::kBadInput, "task \"" + task.name + "\": a contrastive loss pairs two modules that " +
                                               "flow into none of the task's others; it has " + std::to_string(n)};
    } else if (task.loss != "lm" && !task.loss.empty()) {
      return Error{ErrorKind::kBadInput, "task \"" + task.name + "\": loss \"" + task.loss +
                                             "\" is not one weft train --tasks runs (lm: each last module's "
                                             "token cross-entropy; contrastive: CLIP's between its two last modules)"};
    }
    for (const Flow& f : t.flows) {
      if (task.runs(f.from) && task.runs(f.to) && t.module(f.from).tokens > t.module(f.to).tokens)
        return Error{ErrorKind::kBadInput, "task \"" + task.name + "\": flow " + f.from + " -> " + f.to + ": " +
                                               std::to_string(t.module(f.from).tokens) +
                                               " tokens do not fit in the " +
                                               std::to_string(t.module(f.to).tokens) + " of the target"};
    }
  }
  return {};
}

// One parameter tensor and the ranks that use it.
struct Param {
  std::string name;
  std::vector<int64_t> shape;
  enum Init { kNormal, kOnes, kZeros, kTemperature } init = kNormal;
  std::set<int> users;
  at::Tensor value, m, v;  // on users only
};

class Params {
 public:
  Param& add(const std::string& name, std::vector<int64_t> shape, Param::Init init) {
    auto it = index_.find(name);
    if (it != index_.end()) return list_[it->second];
    index_[name] = list_.size();
    list_.push_back({name, std::move(shape), init, {}, {}, {}, {}});
    return list_.back();
  }
  Param& at(const std::string& name) { return list_[index_.at(name)]; }
  std::vector<Param>& list() { return list_; }

 private:
  std::vector<Param> list_;
  std::map<std::string, size_t> index_;
};

// The parameters of a module's layer l, under its holder's name.
void declare_layer(Params& ps, const std::string& h, const LayerShape& L, int l) {
  const std::string p = h + ".layers." + std::to_string(l) + ".";
  const int64_t H = L.hidden, d = L.head_dim, q = L.heads * d, kv = L.kv_heads * d;
  ps.add(p + "norm1.weight", {H}, Param::kOnes);
  ps.add(p + "wqkv", {q + 2 * kv, H}, Param::kNormal);
  ps.add(p + "wo", {H, q}, Param::kNormal);
  ps.add(p + "norm2.weight", {H}, Param::kOnes);
  const int64_t up = L.ffn_kind == FfnKind::kSwiglu ? 2 * L.ffn : L.ffn;
  ps.add(p + "w1", {up, H}, Param::kNormal);
  ps.add(p + "w2", {H, L.ffn}, Param::kNormal);
  if (L.bias) {
    ps.add(p + "norm1.bias", {H}, Param::kZeros);
    ps.add(p + "norm2.bias", {H}, Param::kZeros);
    ps.add(p + "bqkv", {q + 2 * kv}, Param::kZeros);
    ps.add(p + "bo", {H}, Param::kZeros);
    ps.add(p + "b1", {up}, Param::kZeros);
    ps.add(p + "b2", {H}, Param::kZeros);
  }
}

std::vector<std::string> layer_names(const std::string& h, const LayerShape& L, int l) {
  const std::string p = h + ".layers." + std::to_string(l) + ".";
  std::vector<std::string> n = {p + "norm1.weight", p + "wqkv", p + "wo", p + "norm2.weight", p + "w1", p + "w2"};
  if (L.bias)
    for (const char* b : {"norm1.bias", "norm2.bias", "bqkv", "bo", "b1", "b2"}) n.push_back(p + b);
  return n;
}

at::Tensor norm(const at::Tensor& x, NormKind k, const at::Tensor& w, const at::Tensor& b) {
  if (k == NormKind::kRmsNorm) return x * at::rsqrt(x.pow(2).mean({-1}, true) + 1e-5) * w;
  return at::layer_norm(x, {x.size(-1)}, w, b.defined() ? b : at::Tensor(), 1e-5);
}

// One pre-norm layer on x [b, t, H].
at::Tensor layer(const at::Tensor& x, const LayerShape& L, NormKind nk, Params& ps, const std::string& h, int l) {
  const std::string p = h + ".layers." + std::to_string(l) + ".";
  auto w = [&](const std::string& n) { return ps.at(p + n).value; };
  auto bias = [&](const std::string& n) { return L.bias ? ps.at(p + n).value : at::Tensor(); };
  const int64_t B = x.size(0), T = x.size(1), d = L.head_dim, nh = L.heads, nkv = L.kv_heads;
  at::Tensor a = norm(x, nk, w("norm1.weight"), bias("norm1.bias"));
  at::Tensor qkv = at::linear(a, w("wqkv"), bias("bqkv"));
  at::Tensor q = qkv.narrow(-1, 0, nh * d).view({B, T, nh, d}).transpose(1, 2);
  at::Tensor k = qkv.narrow(-1, nh * d, nkv * d).view({B, T, nkv, d}).transpose(1, 2);
  at::Tensor v = qkv.narrow(-1, (nh + nkv) * d, nkv * d).view({B, T, nkv, d}).transpose(1, 2);
  if (nkv != nh) {
    k = k.repeat_interleave(nh / nkv, 1);
    v = v.repeat_interleave(nh / nkv, 1);
  }
  at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(d));
  if (L.kind == LayerKind::kDecoder)
    s = s.masked_fill(at::ones({T, T}, x.options().dtype(at::kBool)).triu(1), -std::numeric_limits<float>::infinity());
  at::Tensor o = at::matmul(at::softmax(s, -1), v).transpose(1, 2).reshape({B, T, nh * d});
  at::Tensor y = x + at::linear(o, w("wo"), bias("bo"));
  at::Tensor f = norm(y, nk, w("norm2.weight"), bias("norm2.bias"));
  at::Tensor u = at::linear(f, w("w1"), bias("b1"));
  if (L.ffn_kind == FfnKind::kSwiglu) {
    const auto parts = u.chunk(2, -1);
    u = at::silu(parts[0]) * parts[1];
  } else {
    u = at::gelu(u);
  }
  return y + at::linear(u, w("w2"), bias("b2"));
}

}  // namespace

Status train_tasks(const TrainOptions& o) {
  auto env_r = read_dist_env();
  if (!env_r.ok()) return env_r.error();
  const DistEnv env = *env_r;
  Result<TaskSpec> tr = multitask::load_tasks(o.tasks);
  if (!tr.ok()) return tr.error();
  const TaskSpec t = std::move(*tr);
  if (Status s = check_runnable(t); !s.ok()) return s;
  WavePlan plan;
  if (o.plan.empty()) {
    plan = sequential_wave_plan(t, env.world);
  } else {
    Result<WavePlan> pr = load_wave_plan(o.plan);
    if (!pr.ok()) return pr.error();
    plan = std::move(*pr);
  }
  if (Status s = validate(plan, t); !s.ok()) return s;
  if (plan.world != env.world)
    return Error{ErrorKind::kBadInput, "plan: world " + std::to_string(plan.world) + " ranks, but the job has " +
                                           std::to_string(env.world) + " (WORLD_SIZE)"};
  for (const auto& w : plan.waves)
    for (const WavePiece& pc : w) {
      const int batch = t.task(pc.task)->batch;
      if (pc.gpus > batch)
        return Error{ErrorKind::kBadInput, "plan: " + pc.task + "/" + pc.module + " on " + std::to_string(pc.gpus) +
                                               " ranks, more than the task's batch of " + std::to_string(batch) +
                                               " samples"};
    }
  set_threads(o.threads);
  const int me = env.rank;
  const double lr = o.lr > 0 ? o.lr : 1e-3;

  // Parameters and the ranks that use them.
  Params ps;
  struct Op {
    const Task* task;
    const Module* m;
    std::vector<std::pair<int, const WavePiece*>> pieces;  // (wave, piece)
    bool sink = true;
    std::vector<const Module*> sources;
  };
  std::map<std::pair<std::string, std::string>, Op> ops;
  std::map<const WavePiece*, std::pair<const Op*, int>> where;  // each piece's operator and its index there
  for (size_t w = 0; w < plan.waves.size(); ++w)
    for (const WavePiece& pc : plan.waves[w]) {
      Op& op = ops[{pc.task, pc.module}];
      op.task = t.task(pc.task);
      op.m = &t.module(pc.module);
      where[&pc] = {&op, static_cast<int>(op.pieces.size())};
      op.pieces.push_back({static_cast<int>(w), &pc});
    }
  for (auto& [key, op] : ops) {
    const std::vector<const Module*> sinks = sinks_of(t, *op.task);
    op.sink = std::find(sinks.begin(), sinks.end(), op.m) != sinks.end();
    for (const Flow& f : t.flows)
      if (f.to == op.m->name && op.task->runs(f.from)) op.sources.push_back(&t.module(f.from));
  }
  for (auto& [key, op] : ops) {
    const Module& m = *op.m;
    const std::string h = m.holder();
    const ModelSpec& s = m.model;
    const bool rms = s.norm == NormKind::kRmsNorm;
    for (const auto& [w, pc] : op.pieces) {
      std::set<int> ranks;
      for (int r = pc->first_rank; r < pc->first_rank + pc->gpus; ++r) ranks.insert(r);
      auto use = [&](Param& p) { p.users.insert(ranks.begin(), ranks.end()); };
      if (pc->first_layer == 0) {
        use(ps.add(h + ".embed", {s.vocab, s.hidden}, Param::kNormal));
        use(ps.add(h + ".pos", {t.module(h).tokens, s.hidden}, Param::kNormal));
        for (const Module* src : op.sources)
          use(ps.add(h + ".from." + src->name, {s.hidden, src->model.hidden}, Param::kNormal));
      }
      for (int l = pc->first_layer; l < pc->first_layer + pc->layers; ++l) {
        declare_layer(ps, h, s.layer(l), l);
        for (const std::string& n : layer_names(h, s.layer(l), l)) use(ps.at(n));
      }
      if (pc->first_layer + pc->layers == s.num_layers()) {
        use(ps.add(h + ".norm.weight", {s.hidden}, Param::kOnes));
        if (!rms) use(ps.add(h + ".norm.bias", {s.hidden}, Param::kZeros));
        if (op.sink && op.task->loss == "contrastive") {
          use(ps.add(task_param(*op.task, m.name + ".proj"), {embed_width(sinks_of(t, *op.task)), s.hidden},
                     Param::kNormal));
          use(ps.add(task_param(*op.task, "logit_scale"), {1}, Param::kTemperature));
        } else if (op.sink) {
          use(s.tied_embeddings ? ps.add(h + ".embed", {s.vocab, s.hidden}, Param::kNormal)
                                : ps.add(h + ".head", {s.vocab, s.hidden}, Param::kNormal));
        }
      }
    }
  }
  int64_t local_params = 0;
  for (Param& p : ps.list()) {
    if (!p.users.count(me)) continue;  // a parameter this rank never uses is not allocated here
    at::Tensor v;
    if (p.init == Param::kOnes) v = at::ones(p.shape);
    else if (p.init == Param::kZeros) v = at::zeros(p.shape);
    else if (p.init == Param::kTemperature) v = at::full(p.shape, std::log(1 / 0.07));
    else {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed ^ fnv(p.name));
      v = at::normal(0.0, 0.02, p.shape, gen);
    }
    p.value = v.set_requires_grad(true);
    p.m = at::zeros(p.shape);
    p.v = at::zeros(p.shape);
    local_params += v.numel();
  }

  // Process groups: the world (point-to-point) and every distinct set of a parameter's users.
  CommConfig cfg;
  cfg.rank = me;
  cfg.world = env.world;
  cfg.master_addr = env.master_addr;
  cfg.master_port = env.master_port;
  cfg.timeout = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000));
  cfg.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000));
  GroupSet groups(cfg);
  std::vector<std::vector<int>> sets;
  std::vector<int> all;
  for (int r = 0; r < env.world; ++r) all.push_back(r);
  sets.push_back(all);
  for (const Param& p : ps.list()) sets.emplace_back(p.users.begin(), p.users.end());
  groups.build(sets);
  Comm& world = groups.world();

  // The crossings: for every consuming piece, its sample blocks from the producing piece; an id
  // each, the same on every rank, for the tags.
  struct Edge {
    const Op* from;
    int from_piece;  // index in from->pieces
    const Op* to;
    int to_piece;
    SampleBlock b;
    int64_t tokens, hidden;  // of what travels (the producer's module)
  };
  std::vector<Edge> edges;
  for (size_t w = 0; w < plan.waves.size(); ++w)
    for (const WavePiece& pc : plan.waves[w]) {
      const auto [op_p, k] = where.at(&pc);
      const Op& op = *op_p;
      auto link = [&](const Op& src, int sk) {
        for (const SampleBlock& b : sample_blocks(op.task->batch, *src.pieces[static_cast<size_t>(sk)].second, pc))
          edges.push_back({&src, sk, &op, k, b, src.m->tokens, src.m->model.hidden});
      };
      if (k > 0) link(op, k - 1);
      else
        for (const Module* s : op.sources) {
          const Op& src = ops.at({pc.task, s->name});
          link(src, static_cast<int>(src.pieces.size()) - 1);
        }
    }

  std::vector<double> step_loss;
  const auto t_start = std::chrono::steady_clock::now();
  for (int step = 1; step <= o.steps; ++step) {
    // Forward, wave by wave. Per (op, piece) run here: the output and the input leaves.
    struct Run {
      at::Tensor out;                       // [n, tokens, hidden] for this rank's samples
      at::Tensor loss;                      // its loss share, when the op's last piece and a sink
      at::Tensor emb, emb_grad;             // a contrastive sink's embeddings [n, E] and their gradient
      int first = 0, n = 0;
      std::vector<std::pair<int, at::Tensor>> leaves;  // (edge, leaf [b.n, tokens, hidden])
    };
    std::map<std::pair<const Op*, int>, Run> runs;
    std::vector<Pending> sends;
    auto ids_of = [&](const Op& op) {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed ^ fnv(op.task->name + "/" + op.m->name) ^
                                                          (static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull));
      return at::randint(op.m->model.vocab, {op.task->batch, op.m->tokens + 1}, gen, at::kLong);
    };
    for (size_t w = 0; w < plan.waves.size(); ++w) {
      for (const WavePiece& pc : plan.waves[w]) {
        if (me < pc.first_rank || me >= pc.first_rank + pc.gpus) continue;
        const auto [op_p, k] = where.at(&pc);
        const Op& op = *op_p;
        Run& run = runs[{&op, k}];
        std::tie(run.first, run.n) = samples_of_rank(pc.first_rank, pc.gpus, op.task->batch, me);
        const Module& m = *op.m;
        const std::string h = m.holder();
        // Inputs: the blocks of every edge into this piece that land here.
        std::map<const Op*, std::vector<std::pair<int, at::Tensor>>> in;  // producer -> (first, leaf)
        for (size_t e = 0; e < edges.size(); ++e) {
          const Edge& ed = edges[e];
          if (ed.to != &op || ed.to_piece != k || ed.b.dst != me) continue;
          at::Tensor x;
          if (ed.b.src == me) {
            const Run& src = runs.at({ed.from, ed.from_piece});
            x = src.out.narrow(0, ed.b.first - src.first, ed.b.n).detach().clone();
          } else {
            x = at::empty({ed.b.n, ed.tokens, ed.hidden});
            world.recv(x, ed.b.src, static_cast<int>(2 * e));
          }
          x.set_requires_grad(true);
          run.leaves.push_back({static_cast<int>(e), x});
          in[ed.from].push_back({ed.b.first, x});
        }
        auto gather = [&](const Op* from) {
          auto& v = in[from];
          std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
          std::vector<at::Tensor> parts;
          for (auto& [f, x] : v) parts.push_back(x);
          return at::cat(parts, 0);
        };
        at::Tensor x;
        const at::Tensor ids = ids_of(op).narrow(0, run.first, run.n);
        if (k == 0) {
          x = at::embedding(ps.at(h + ".embed").value, ids.narrow(1, 0, m.tokens)) +
              ps.at(h + ".pos").value.narrow(0, 0, m.tokens);
          for (const Module* s : op.sources) {
            const at::Tensor e = at::linear(gather(&ops.at({pc.task, s->name})), ps.at(h + ".from." + s->name).value);
            x = at::cat({x.narrow(1, 0, s->tokens) + e, x.narrow(1, s->tokens, m.tokens - s->tokens)}, 1);
          }
        } else {
          x = gather(&op);
        }
        for (int l = pc.first_layer; l < pc.first_layer + pc.layers; ++l)
          x = layer(x, m.model.layer(l), m.model.norm, ps, h, l);
        const bool last = pc.first_layer + pc.layers == m.model.num_layers();
        if (last) {
          x = norm(x, m.model.norm, ps.at(h + ".norm.weight").value,
                   m.model.norm == NormKind::kRmsNorm ? at::Tensor() : ps.at(h + ".norm.bias").value);
          if (op.sink && op.task->loss == "contrastive") {
            const at::Tensor e = at::linear(x.select(1, 0), ps.at(task_param(*op.task, m.name + ".proj")).value);
            run.emb = e / e.norm(2, {-1}, true);
          } else if (op.sink) {
            const at::Tensor& table = m.model.tied_embeddings ? ps.at(h + ".embed").value : ps.at(h + ".head").value;
            const at::Tensor logits = at::linear(x, table).reshape({-1, m.model.vocab});
            const at::Tensor targets = ids.narrow(1, 1, m.tokens).reshape({-1});
            run.loss = at::cross_entropy_loss(logits, targets, {}, at::Reduction::Sum) /
                       static_cast<double>(op.task->batch * m.tokens);
          }
        }
        run.out = x;
        // Outputs: the blocks of every edge out of this piece that leave here for another rank.
        for (size_t e = 0; e < edges.size(); ++e) {
          const Edge& ed = edges[e];
          if (ed.from != &op || ed.from_piece != k || ed.b.src != me || ed.b.dst == me) continue;
          sends.push_back(world.send(x.narrow(0, ed.b.first - run.first, ed.b.n).detach().contiguous(), ed.b.dst,
                                     static_cast<int>(2 * e)));
        }
      }
    }
    for (Pending& s : sends) s.wait();
    sends.clear();
    std::vector<double> task_loss(t.tasks.size(), 0.0);
    // Contrastive losses, on the ranks of the two sinks' last pieces (the temperature's users): the
    // batch's embeddings of both gathered on each (an all-reduce of each rank's rows), the loss and
    // its gradient computed whole there; each piece keeps its rows of the gradient for its backward,
    // the temperature's gradient and the loss counted on the first of those ranks only.
    for (size_t i = 0; i < t.tasks.size(); ++i) {
      const Task& task = t.tasks[i];
      if (task.loss != "contrastive") continue;
      Param& scale = ps.at(task_param(task, "logit_scale"));
      if (!scale.users.count(me)) continue;
      const std::vector<const Module*> sk = sinks_of(t, task);
      const int64_t B = task.batch, E = embed_width(sk);
      at::Tensor both = at::zeros({2, B, E});
      Run* mine[2] = {nullptr, nullptr};
      for (int j = 0; j < 2; ++j) {
        const Op& op = ops.at({task.name, sk[static_cast<size_t>(j)]->name});
        auto it = runs.find({&op, static_cast<int>(op.pieces.size()) - 1});
        if (it == runs.end()) continue;
        mine[j] = &it->second;
        both[j].narrow(0, it->second.first, it->second.n).copy_(it->second.emb.detach());
      }
      if (scale.users.size() > 1) groups.get(std::vector<int>(scale.users.begin(), scale.users.end())).allreduce_sum(both);
      const bool first = *scale.users.begin() == me;
      at::Tensor a = both[0].clone().set_requires_grad(true), b = both[1].clone().set_requires_grad(true);
      const at::Tensor temp = first ? scale.value : scale.value.detach();
      const at::Tensor logits = temp.exp() * at::matmul(a, b.t());
      const at::Tensor labels = at::arange(B, at::kLong);
      const at::Tensor loss = (at::cross_entropy_loss(logits, labels) + at::cross_entropy_loss(logits.t(), labels)) / 2;
      torch::autograd::backward({loss}, {at::ones_like(loss)});
      for (int j = 0; j < 2; ++j)
        if (mine[j]) mine[j]->emb_grad = (j == 0 ? a : b).grad().narrow(0, mine[j]->first, mine[j]->n).contiguous();
      if (first) task_loss[i] += loss.item<double>();
    }
    // Backward, waves in reverse: each piece's output gradient from its consumers, then its inputs'
    // gradients back to their producers.
    std::map<std::pair<int, int>, at::Tensor> local_grad;  // edge -> gradient of a block kept here
    for (size_t w = plan.waves.size(); w-- > 0;) {
      for (const WavePiece& pc : plan.waves[w]) {
        if (me < pc.first_rank || me >= pc.first_rank + pc.gpus) continue;
        const auto [op_p, k] = where.at(&pc);
        const Op& op = *op_p;
        Run& run = runs.at({&op, k});
        at::Tensor g = at::zeros_like(run.out);
        bool any = false;
        for (size_t e = 0; e < edges.size(); ++e) {
          const Edge& ed = edges[e];
          if (ed.from != &op || ed.from_piece != k || ed.b.src != me) continue;
          at::Tensor part;
          if (ed.b.dst == me) {
            part = local_grad.at({static_cast<int>(e), 0});
          } else {
            part = at::empty({ed.b.n, ed.tokens, ed.hidden});
            world.recv(part, ed.b.dst, static_cast<int>(2 * e + 1));
          }
          g.narrow(0, ed.b.first - run.first, ed.b.n).add_(part);
          any = true;
        }
        std::vector<at::Tensor> roots, grads;
        if (any) roots.push_back(run.out), grads.push_back(g);
        if (run.emb.defined()) roots.push_back(run.emb), grads.push_back(run.emb_grad);
        if (run.loss.defined()) {
          roots.push_back(run.loss), grads.push_back(at::ones_like(run.loss));
          for (size_t i = 0; i < t.tasks.size(); ++i)
            if (&t.tasks[i] == op.task) task_loss[i] += run.loss.item<double>();
        }
        if (!roots.empty()) torch::autograd::backward(roots, grads);
        for (auto& [e, leaf] : run.leaves) {
          const Edge& ed = edges[static_cast<size_t>(e)];
          at::Tensor lg = leaf.grad().defined() ? leaf.grad() : at::zeros_like(leaf);
          if (ed.b.src == me) local_grad[{e, 0}] = lg;
          else sends.push_back(world.send(lg.contiguous(), ed.b.src, static_cast<int>(2 * e + 1)));
        }
      }
    }
    for (Pending& s : sends) s.wait();
    sends.clear();
    // Gradients summed over each parameter's users; the global norm (each parameter counted on its
    // first user); AdamW.
    for (Param& p : ps.list()) {
      if (!p.users.count(me)) continue;
      if (!p.value.grad().defined()) p.value.mutable_grad() = at::zeros_like(p.value);
      if (p.users.size() > 1) {
        at::Tensor gsum = p.value.grad();
        groups.get(std::vector<int>(p.users.begin(), p.users.end())).allreduce_sum(gsum);
      }
    }
    at::Tensor norm_sq = at::zeros({1}, at::kDouble);
    for (Param& p : ps.list())
      if (!p.users.empty() && *p.users.begin() == me) norm_sq += p.value.grad().to(at::kDouble).pow(2).sum();
    world.allreduce_sum(norm_sq);
    const double gnorm = std::sqrt(norm_sq.item<double>());
    const double scale = o.clip > 0 && gnorm > o.clip ? o.clip / (gnorm + 1e-6) : 1.0;
    {
      at::NoGradGuard ng;
      const double bc1 = 1 - std::pow(o.beta1, step), bc2 = 1 - std::pow(o.beta2, step);
      for (Param& p : ps.list()) {
        if (!p.users.count(me)) continue;
        const at::Tensor gr = p.value.grad() * scale;
        p.m.mul_(o.beta1).add_(gr, 1 - o.beta1);
        p.v.mul_(o.beta2).addcmul_(gr, gr, 1 - o.beta2);
        if (p.shape.size() >= 2) p.value.mul_(1 - lr * o.weight_decay);
        p.value.sub_(lr * (p.m / bc1) / ((p.v / bc2).sqrt() + o.eps));
        p.value.mutable_grad().zero_();
      }
    }
    at::Tensor losses = at::tensor(task_loss, at::kDouble);
    world.allreduce_sum(losses);
    double total = 0;
    for (int64_t i = 0; i < losses.numel(); ++i) total += losses[i].item<double>();
    step_loss.push_back(total);
    if (me == 0) {
      if (o.format == "json") {
        Json j{{"step", step}, {"loss", total}, {"grad_norm", gnorm}, {"lr", lr}, {"tasks", Json::object()}};
        for (size_t i = 0; i < t.tasks.size(); ++i) j["tasks"][t.tasks[i].name] = losses[static_cast<int64_t>(i)].item<double>();
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("step %d loss %.6f", step, total);
        for (size_t i = 0; i < t.tasks.size(); ++i)
          std::printf(" %s %.6f", t.tasks[i].name.c_str(), losses[static_cast<int64_t>(i)].item<double>());
        std::printf(" grad_norm %.4f\n", gnorm);
      }
      std::fflush(stdout);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  // What crossed between pieces (this job's sends, all ranks) against the plan's transfers.
  at::Tensor sent = at::zeros({1}, at::kDouble);
  for (const CollectiveRecord& r : groups.collectives())
    if (r.op == CollectiveOp::kSend) sent += static_cast<double>(r.bytes);
  world.allreduce_sum(sent);
  double predicted = 0;
  for (const WaveTransfer& x : wave_transfers(plan, t)) predicted += static_cast<double>(x.elements);
  predicted *= 2.0 * sizeof(float) * o.steps;  // forward and backward, fp32, every step
  // The consolidated parameters: each from its first user.
  if (!o.save_params.empty()) {
    ParamsFile f;
    f.step = o.steps;
    for (size_t i = 0; i < ps.list().size(); ++i) {
      Param& p = ps.list()[i];
      const int owner = *p.users.begin();
      at::Tensor v;
      if (owner == me) v = p.value.detach().contiguous();
      if (owner != 0) {
        if (me == owner) world.send(v, 0, static_cast<int>(1000000 + i)).wait();
        if (me == 0) {
          v = at::empty(p.shape);
          world.recv(v, owner, static_cast<int>(1000000 + i));
        }
      }
      if (me == 0) {
        NamedParam np{p.name, p.shape, std::vector<float>(v.data_ptr<float>(), v.data_ptr<float>() + v.numel())};
        f.params.push_back(std::move(np));
      }
    }
    if (me == 0)
      if (Status s = write_params_file(o.save_params, f); !s.ok()) return s;
  }
  at::Tensor held = at::tensor({static_cast<double>(local_params)}, at::kDouble);
  if (me == 0) {
    const double sent_bytes = sent.item<double>();
    if (o.format == "json") {
      Json j{{"summary", true},
             {"steps", o.steps},
             {"final_loss", step_loss.empty() ? 0.0 : step_loss.back()},
             {"p2p_bytes", sent_bytes},
             {"p2p_bytes_predicted", predicted},
             {"local_params_rank0", local_params},
             {"seconds", seconds}};
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("tasks: %zu, waves: %zu, ranks: %d; bytes sent between pieces %.0f (the plan's transfers: %.0f); "
                  "%.1f s\n",
                  t.tasks.size(), plan.waves.size(), env.world, sent_bytes, predicted, seconds);
    }
    std::fflush(stdout);
  }
  world.barrier();
  return {};
}

}  // namespace weft::runtime
