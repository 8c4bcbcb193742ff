// Galvatron strategy JSON <-> weft Plan. The mapping is in docs/galvatron.md.
#include "weft/galvatron/strategy.h"

#include <set>
#include <sstream>

#include "weft/core/format.h"

namespace weft::galvatron {

namespace {

std::string join(const std::vector<int>& xs) {
  std::string out;
  for (size_t i = 0; i < xs.size(); ++i) out += (i ? "," : "") + S(xs[i]);
  return out;
}

// "2,2,1" -> {2,2,1}; errors name the key and the element.
std::vector<int> parse_list(const JsonObj& o, const std::string& key) {
  const std::string text = o.str(key);
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  int index = 0;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    while (used < item.size() && item[used] == ' ') ++used;
    if (used != item.size() || item.empty())
      o.fail(key, "element " + S(index) + " is \"" + item + "\", expected an integer");
    out.push_back(v);
    ++index;
  }
  if (out.empty()) o.fail(key, "empty list");
  return out;
}

void require_len(const JsonObj& o, const std::string& key, const std::vector<int>& v, size_t n,
                 const std::string& what) {
  if (v.size() != n) o.fail(key, S(v.size()) + " entries but " + what + " has " + S(n));
}

void require_flags(const JsonObj& o, const std::string& key, const std::vector<int>& v) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] != 0 && v[i] != 1) o.fail(key, "element " + S(i) + " is " + S(v[i]) + ", expected 0 or 1");
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Import

Result<Plan> import_strategy(const Json& j, const ModelSpec& model, const ClusterSpec& cluster, int seq) {
  return import_strategy(j, model, cluster, seq, ImportOptions{});
}

Result<Plan> import_strategy(const Json& j, const ModelSpec& model, const ClusterSpec& cluster, int seq,
                             const ImportOptions& opt) {
  auto plan = catch_errors([&]() -> Plan {
    const JsonObj o(j, "galvatron strategy");
    o.reject_unknown({"pp_deg", "tp_sizes_enc", "tp_consecutive_flags", "dp_types_enc", "use_sp", "checkpoint",
                      "world_size", "global_bsz", "chunks", "pp_division", "pipeline_type", "default_dp_type", "vtp",
                      "vsp", "embed_sdp", "cp_sizes_enc", "vcp"});
    const int L = model.num_layers();
    const int world = cluster.total_gpus();
    if (o.has("world_size") && o.integer("world_size") != world)
      o.fail("world_size", S(o.integer("world_size")) + " but the cluster has " + S(world) + " GPUs");
    const int pp = static_cast<int>(o.integer("pp_deg"));
    if (pp < 1 || world % pp != 0) o.fail("pp_deg", S(pp) + " does not divide " + S(world) + " GPUs");
    const int stage_size = world / pp;

    const std::string what = "the model (" + S(L) + " layers)";
    const auto tp_sizes = parse_list(o, "tp_sizes_enc");
    require_len(o, "tp_sizes_enc", tp_sizes, L, what);
    const auto consec = parse_list(o, "tp_consecutive_flags");
    require_len(o, "tp_consecutive_flags", consec, L, what);
    require_flags(o, "tp_consecutive_flags", consec);
    for (int i = 0; i < L; ++i)
      if (consec[i] != 1)
        o.fail("tp_consecutive_flags", "layer " + S(i) +
                                           " is 0 (tensor-parallel ranks strided over the data-parallel ones); weft "
                                           "places tensor-parallel ranks consecutively");
    const auto dp_types = parse_list(o, "dp_types_enc");
    require_len(o, "dp_types_enc", dp_types, L, what);
    require_flags(o, "dp_types_enc", dp_types);
    const auto use_sp = o.has("use_sp") ? parse_list(o, "use_sp") : std::vector<int>(L, 0);
    require_len(o, "use_sp", use_sp, L, what);
    require_flags(o, "use_sp", use_sp);
    const auto ckpt = parse_list(o, "checkpoint");
    require_len(o, "checkpoint", ckpt, L, what);
    require_flags(o, "checkpoint", ckpt);
    const auto cp_sizes = o.has("cp_sizes_enc") ? parse_list(o, "cp_sizes_enc") : std::vector<int>(L, 1);
    require_len(o, "cp_sizes_enc", cp_sizes, L, what);
    const auto division = parse_list(o, "pp_division");
    if (static_cast<int>(division.size()) != pp)
      o.fail("pp_division", S(division.size()) + " stages listed but pp_deg is " + S(pp));
    long long covered = 0;
    for (size_t s = 0; s < division.size(); ++s) {
      if (division[s] < 1) o.fail("pp_division", "stage " + S(s) + " has " + S(division[s]) + " layers");
      covered += division[s];
    }
    if (covered != L) o.fail("pp_division", "covers " + S(covered) + " layers but the model has " + S(L));

    const std::string dflt = o.str_or("default_dp_type", "zero2");
    if (dflt != "zero2" && dflt != "ddp") o.fail("default_dp_type", "expected \"zero2\" or \"ddp\", got \"" + dflt + "\"");
    const std::string ptype = o.str_or("pipeline_type", "pipedream_flush");
    if (ptype != "pipedream_flush" && ptype != "gpipe")
      o.fail("pipeline_type", "expected \"pipedream_flush\" (1F1B) or \"gpipe\", got \"" + ptype + "\"");

    auto make = [&](const std::string& where, int tp_sp, bool ulysses, int cp, bool zero3, bool full) {
      if (tp_sp < 1 || cp < 1 || stage_size % (tp_sp * cp) != 0)
        throw InputError("galvatron strategy." + where + ": tp_sp=" + S(tp_sp) + " x cp=" + S(cp) +
                         " does not divide the " + S(stage_size) + " GPUs of a stage (" + S(world) +
                         " GPUs / pp_deg " + S(pp) + ")");
      LayerStrategy s;
      s.tp = ulysses ? 1 : tp_sp;
      s.ulysses = ulysses ? tp_sp : 1;
      s.sp = !ulysses && tp_sp > 1 && opt.megatron_sp;
      s.cp = cp;
      s.dp = stage_size / (tp_sp * cp);
      s.zero = zero3 ? 3 : (dflt == "zero2" && s.dp > 1 ? 2 : 0);
      s.recompute = full ? Recompute::kFull : Recompute::kNone;
      return s;
    };

    Plan p;
    p.model = model;
    p.cluster = cluster;
    p.train.seq = seq;
    p.train.global_batch = static_cast<int>(o.integer("global_bsz"));
    p.train.micro_batches = static_cast<int>(o.integer("chunks"));
    p.train.pp = pp;
    p.train.vp = 1;
    p.train.schedule = ptype == "gpipe" ? Schedule::kGpipe : Schedule::k1F1B;
    p.train.dtype = opt.dtype;
    int next = 0;
    for (int s = 0; s < pp; ++s) {
      Stage st;
      st.first_layer = next;
      for (int i = next; i < next + division[s]; ++i)
        st.layers.push_back(make("layer " + S(i), tp_sizes[i], use_sp[i] == 1, cp_sizes[i], dp_types[i] == 1,
                                 ckpt[i] == 1));
      next += division[s];
      p.stages.push_back(std::move(st));
    }
    const long long vsp = o.integer_or("vsp", 0), sdp = o.integer_or("embed_sdp", 0);
    if (vsp != 0 && vsp != 1) o.fail("vsp", "expected 0 or 1, got " + S(vsp));
    if (sdp != 0 && sdp != 1) o.fail("embed_sdp", "expected 0 or 1, got " + S(sdp));
    p.embedding = make("vtp", static_cast<int>(o.integer_or("vtp", 1)), vsp == 1, static_cast<int>(o.integer_or("vcp", 1)),
                       sdp == 1, false);
    return p;
  });
  if (!plan.ok()) return plan;
  Status v = validate(*plan);
  if (!v.ok()) return v.error().with_context("galvatron strategy");
  return plan;
}

// ---------------------------------------------------------------------------------------------
// Export

Result<Json> export_strategy(const Plan& p) {
  return catch_errors([&]() -> Json {
    const TrainSettings& t = p.train;
    auto refuse = [](const std::string& where, const std::string& why) -> void {
      throw InputError("cannot export to Galvatron: " + where + ": " + why);
    };
    if (t.schedule == Schedule::kZbV)
      refuse("train.schedule", "zb-v (pp=" + S(t.pp) + ", two model chunks per device group in a V) has no Galvatron "
                               "equivalent (it runs gpipe and 1f1b, one stage per device group)");
    if (t.schedule == Schedule::kInterleaved || t.vp != 1)
      refuse("train.schedule", "interleaved pipelines (vp=" + S(t.vp) + ") have no Galvatron equivalent");
    if (t.schedule == Schedule::kZbH1 && t.pp > 1)
      refuse("train.schedule", "zb-h1 (pp=" + S(t.pp) + ") has no Galvatron equivalent (it runs gpipe and 1f1b)");
    bool want_zero2 = false, want_ddp = false, any_cp = false;
    int sp_flag = -1;
    std::string sp_first;
    auto check = [&](const LayerStrategy& s, const std::string& where) {
      if (s.tp > 1 && s.ulysses > 1)
        refuse(where, "tp=" + S(s.tp) + " and ulysses=" + S(s.ulysses) + " in one layer (Galvatron uses one or the other)");
      if (s.zero == 1) refuse(where, "ZeRO-1 (Galvatron has DDP, ZeRO-2 and ZeRO-3)");
      if (s.recompute == Recompute::kSelective) refuse(where, "selective recompute (Galvatron checkpoints whole layers)");
      if (s.ep > 1) refuse(where, "expert parallelism ep=" + S(s.ep));
      if (s.zero == 2 && s.dp == 1) refuse(where, "ZeRO-2 with dp=1 (Galvatron uses DDP when dp=1)");
      if (s.zero == 2) want_zero2 = true;
      if (s.zero == 0 && s.dp > 1) want_ddp = true;
      if (s.cp > 1) any_cp = true;
      if (s.tp > 1) {
        if (sp_flag >= 0 && sp_flag != static_cast<int>(s.sp))
          refuse(where, "Megatron sequence parallelism is " + std::string(s.sp ? "on" : "off") + " here but " +
                            std::string(s.sp ? "off" : "on") + " at " + sp_first +
                            " (Galvatron's sequence_parallel is one switch)");
        if (sp_flag < 0) sp_first = where;
        sp_flag = s.sp;
      }
    };
    std::vector<int> tp_sizes, consec, dp_types, use_sp, ckpt, cp_sizes, division;
    int layer = 0;
    for (size_t s = 0; s < p.stages.size(); ++s) {
      division.push_back(p.stages[s].num_layers());
      for (const LayerStrategy& x : p.stages[s].layers) {
        check(x, "layer " + S(layer));
        tp_sizes.push_back(x.tp * x.ulysses);
        consec.push_back(1);
        dp_types.push_back(x.zero == 3 ? 1 : 0);
        use_sp.push_back(x.ulysses > 1 ? 1 : 0);
        ckpt.push_back(x.recompute == Recompute::kFull ? 1 : 0);
        cp_sizes.push_back(x.cp);
        ++layer;
      }
    }
    const LayerStrategy& e = p.embedding;
    check(e, "embedding");
    if (e.recompute != Recompute::kNone) refuse("embedding", "Galvatron does not recompute the embedding / LM head");
    if (want_zero2 && want_ddp)
      refuse("layers", "some dp > 1 layers use ZeRO-2 and others DDP (Galvatron has one default_dp_type)");

    Json j;
    j["pp_deg"] = t.pp;
    j["tp_sizes_enc"] = join(tp_sizes);
    j["tp_consecutive_flags"] = join(consec);
    j["dp_types_enc"] = join(dp_types);
    j["use_sp"] = join(use_sp);
    j["checkpoint"] = join(ckpt);
    if (any_cp) j["cp_sizes_enc"] = join(cp_sizes);
    j["world_size"] = p.world_size();
    j["global_bsz"] = t.global_batch;
    j["chunks"] = t.micro_batches;
    j["pp_division"] = join(division);
    j["pipeline_type"] = t.schedule == Schedule::kGpipe ? "gpipe" : "pipedream_flush";
    j["default_dp_type"] = want_ddp ? "ddp" : "zero2";
    j["vtp"] = e.tp * e.ulysses;
    j["vsp"] = e.ulysses > 1 ? 1 : 0;
    j["embed_sdp"] = e.zero == 3 ? 1 : 0;
    if (any_cp) j["vcp"] = e.cp;
    return j;
  });
}

std::string dump_strategy(const Json& strategy) { return strategy.dump(4); }

}  // namespace weft::galvatron
