#include "weft/plan/checkpoint_layout.h"

#include <algorithm>
#include <map>
#include <set>

#include "weft/core/format.h"
#include "weft/plan/geometry.h"

namespace weft {

namespace {

constexpr StateKind kKinds[] = {StateKind::kParams, StateKind::kAdamM, StateKind::kAdamV};

// The pieces of `u`'s flat range [lo, hi) (a rank's entry), offsets relative to lo.
std::vector<SavedPiece> pieces_of(const UnitSpec& u, int64_t lo, int64_t hi) {
  std::vector<SavedPiece> out;
  for (const ParamSpec& ps : u.params) {
    const int64_t b = std::max(lo, ps.offset), e = std::min(hi, ps.offset + ps.numel());
    if (b >= e) continue;
    SavedPiece p;
    p.param = ps.name;
    p.full_shape = ps.full_shape;
    p.shard_dim = ps.shard_dim;
    p.shard_start = ps.shard_dim >= 0 ? ps.shard_start : 0;
    p.shard_len = ps.shard_dim >= 0 ? ps.shard_len : (ps.full_shape.empty() ? 1 : ps.full_shape[0]);
    p.local_begin = b - ps.offset;
    p.count = e - b;
    p.offset = b - lo;
    out.push_back(std::move(p));
  }
  return out;
}

int64_t product(const std::vector<int64_t>& s, size_t from = 0) {
  int64_t n = 1;
  for (size_t i = from; i < s.size(); ++i) n *= s[i];
  return n;
}

// Calls f(full_begin, piece_offset, len) for every contiguous run of the full tensor that the piece
// covers, in order (piece_offset: from the piece's first element).
template <class F>
void for_each_run(const SavedPiece& p, F f) {
  if (p.shard_dim < 0) {
    f(p.local_begin, int64_t{0}, p.count);
    return;
  }
  const int64_t inner = product(p.full_shape, static_cast<size_t>(p.shard_dim) + 1);
  const int64_t block = p.shard_len * inner;                      // one outer index of the slice
  const int64_t full_block = p.full_shape[static_cast<size_t>(p.shard_dim)] * inner;
  int64_t j = p.local_begin;
  const int64_t end = p.local_begin + p.count;
  while (j < end) {
    const int64_t outer = j / block, r = j % block;
    const int64_t len = std::min(end - j, block - r);
    f(outer * full_block + p.shard_start * inner + r, j - p.local_begin, len);
    j += len;
  }
}

// Where the checkpoint holds a run of a full tensor.
struct SourceRun {
  int64_t begin = 0, count = 0;  // in the full tensor
  int rank = 0, entry = 0;
  int64_t offset = 0;            // in the entry
};

struct TensorSources {
  std::vector<int64_t> shape;
  std::vector<SourceRun> runs[3];  // per StateKind: sorted, non-overlapping
};

// Sorted, non-overlapping runs: in order of begin (lowest rank first among equal begins), the part
// of each run past what earlier runs cover; adjacent runs of one entry merged.
std::vector<SourceRun> cover(std::vector<SourceRun> runs) {
  std::stable_sort(runs.begin(), runs.end(), [](const SourceRun& a, const SourceRun& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.rank < b.rank;
  });
  std::vector<SourceRun> kept;
  int64_t covered = 0;
  for (const SourceRun& s : runs) {
    const int64_t end = s.begin + s.count;
    if (end <= covered) continue;
    SourceRun k = s;
    if (k.begin < covered) {
      k.offset += covered - k.begin;
      k.count = end - covered;
      k.begin = covered;
    }
    if (!kept.empty()) {
      SourceRun& b = kept.back();
      if (b.rank == k.rank && b.entry == k.entry && b.begin + b.count == k.begin && b.offset + b.count == k.offset) {
        b.count += k.count;
        covered = end;
        continue;
      }
    }
    kept.push_back(k);
    covered = end;
  }
  return kept;
}

// `mine` (sorted, non-overlapping) with the gaps between its runs filled from `others` (the same).
std::vector<SourceRun> prefer_runs(const std::vector<SourceRun>& mine, const std::vector<SourceRun>& others) {
  std::vector<SourceRun> out;
  size_t i = 0;
  for (const SourceRun& o : others) {
    int64_t a = o.begin;
    const int64_t b = o.begin + o.count;
    while (a < b) {
      while (i < mine.size() && mine[i].begin + mine[i].count <= a) out.push_back(mine[i++]);
      const int64_t stop = i < mine.size() ? std::min(b, mine[i].begin) : b;
      if (a < stop) {
        SourceRun piece = o;
        piece.offset += a - o.begin;
        piece.begin = a;
        piece.count = stop - a;
        out.push_back(piece);
      }
      if (stop == b) break;
      a = std::min(b, mine[i].begin + mine[i].count);  // mine[i] covers [stop, ...)
    }
  }
  while (i < mine.size()) out.push_back(mine[i++]);
  std::sort(out.begin(), out.end(), [](const SourceRun& x, const SourceRun& y) { return x.begin < y.begin; });
  return out;
}

// Where the checkpoint holds every tensor, per state; with prefer >= 0, that rank's runs first.
std::map<std::string, TensorSources> sources_of(const CheckpointIndex& idx, int prefer = -1) {
  std::map<std::string, TensorSources> out;
  for (int r = 0; r < static_cast<int>(idx.ranks.size()); ++r) {
    const auto& entries = idx.ranks[static_cast<size_t>(r)];
    for (int e = 0; e < static_cast<int>(entries.size()); ++e) {
      const SavedEntry& en = entries[static_cast<size_t>(e)];
      for (const SavedPiece& p : en.pieces) {
        TensorSources& t = out[p.param];
        t.shape = p.full_shape;
        for_each_run(p, [&](int64_t fb, int64_t po, int64_t len) {
          t.runs[static_cast<int>(en.kind)].push_back({fb, len, r, e, p.offset + po});
        });
      }
    }
  }
  for (auto& [name, t] : out)
    for (auto& runs : t.runs) {
      if (prefer < 0) {
        runs = cover(std::move(runs));
        continue;
      }
      std::vector<SourceRun> mine, others;
      for (const SourceRun& r : runs) (r.rank == prefer ? mine : others).push_back(r);
      runs = prefer_runs(cover(std::move(mine)), cover(std::move(others)));
    }
  return out;
}

}  // namespace

std::string shape_label(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(shape[i]);
  }
  out += ']';
  return out;
}

const char* entry_suffix(StateKind k) {
  switch (k) {
    case StateKind::kParams: return "params";
    case StateKind::kAdamM: return "adam_m";
    case StateKind::kAdamV: return "adam_v";
  }
  return "?";
}

std::vector<SavedEntry> saved_entries(const Plan& p, int rank) {
  std::vector<SavedEntry> out;
  for (const UnitSpec& u : unit_specs(p, rank)) {
    const int n = static_cast<int>(u.sync_ranks.size());
    const int k = static_cast<int>(std::find(u.sync_ranks.begin(), u.sync_ranks.end(), rank) - u.sync_ranks.begin());
    const int64_t shard = u.padded / n;
    for (StateKind kind : kKinds) {
      // Parameters: the whole buffer below ZeRO-3; moments: the whole buffer under ZeRO 0.
      const bool sharded = kind == StateKind::kParams ? u.zero == 3 : u.zero > 0;
      const int64_t lo = sharded ? k * shard : 0, len = sharded ? shard : u.numel;
      SavedEntry e;
      e.name = u.name + "." + entry_suffix(kind);
      e.kind = kind;
      e.numel = len;
      e.pieces = pieces_of(u, lo, lo + len);
      out.push_back(std::move(e));
    }
  }
  return out;
}

CheckpointIndex checkpoint_index(const Plan& p) {
  CheckpointIndex idx;
  idx.world = p.world_size();
  for (int r = 0; r < idx.world; ++r) idx.ranks.push_back(saved_entries(p, r));
  return idx;
}

Json to_json(const CheckpointIndex& idx) {
  Json files = Json::array();
  for (int r = 0; r < static_cast<int>(idx.ranks.size()); ++r) {
    Json entries = Json::array();
    for (const SavedEntry& e : idx.ranks[static_cast<size_t>(r)]) {
      Json pieces = Json::array();
      for (const SavedPiece& p : e.pieces)
        pieces.push_back({{"param", p.param},
                          {"shape", p.full_shape},
                          {"dim", p.shard_dim},
                          {"start", p.shard_start},
                          {"len", p.shard_len},
                          {"local_begin", p.local_begin},
                          {"count", p.count},
                          {"offset", p.offset}});
      entries.push_back({{"name", e.name}, {"numel", e.numel}, {"pieces", pieces}});
    }
    files.push_back({{"rank", r}, {"file", "rank-" + std::to_string(r) + ".bin"}, {"entries", entries}});
  }
  return Json{{"format", "weft-checkpoint-index"}, {"version", 1}, {"world", idx.world}, {"files", files}};
}

Result<CheckpointIndex> checkpoint_index_from_json(const Json& j, const std::string& path) {
  return catch_errors([&]() -> Result<CheckpointIndex> {
    JsonObj o(j, path);
    o.reject_unknown({"format", "version", "world", "files"});
    if (o.str("format") != "weft-checkpoint-index")
      o.fail("format", "expected \"weft-checkpoint-index\", got \"" + o.str("format") + "\"");
    if (o.integer("version") != 1) o.fail("version", "unsupported version " + std::to_string(o.integer("version")));
    CheckpointIndex idx;
    const long long world = o.integer("world");
    if (world < 1) o.fail("world", "expected at least 1 rank, got " + std::to_string(world));
    idx.world = static_cast<int>(world);
    const auto files = o.array_of_obj("files");
    if (static_cast<long long>(files.size()) != world)
      o.fail("files", std::to_string(files.size()) + " files for a world of " + std::to_string(world));
    for (size_t r = 0; r < files.size(); ++r) {
      const JsonObj& f = files[r];
      f.reject_unknown({"rank", "file", "entries"});
      if (f.integer("rank") != static_cast<long long>(r))
        f.fail("rank", "expected " + std::to_string(r) + " (files in rank order), got " + std::to_string(f.integer("rank")));
      std::vector<SavedEntry> entries;
      for (const JsonObj& eo : f.array_of_obj("entries")) {
        eo.reject_unknown({"name", "numel", "pieces"});
        SavedEntry e;
        e.name = eo.str("name");
        const auto dot = e.name.rfind('.');
        const std::string suffix = dot == std::string::npos ? "" : e.name.substr(dot + 1);
        bool known = false;
        for (StateKind k : kKinds)
          if (suffix == entry_suffix(k)) e.kind = k, known = true;
        if (!known) eo.fail("name", "\"" + e.name + "\" does not end in .params, .adam_m or .adam_v");
        e.numel = eo.integer("numel");
        if (e.numel < 0) eo.fail("numel", "negative (" + std::to_string(e.numel) + ")");
        for (const JsonObj& po : eo.array_of_obj("pieces")) {
          po.reject_unknown({"param", "shape", "dim", "start", "len", "local_begin", "count", "offset"});
          SavedPiece p;
          p.param = po.str("param");
          for (long long d : po.array_of_int("shape")) {
            if (d < 1) po.fail("shape", "dimension " + std::to_string(d) + " below 1");
            p.full_shape.push_back(d);
          }
          p.shard_dim = static_cast<int>(po.integer("dim"));
          p.shard_start = po.integer("start");
          p.shard_len = po.integer("len");
          p.local_begin = po.integer("local_begin");
          p.count = po.integer("count");
          p.offset = po.integer("offset");
          const int rank_dims = static_cast<int>(p.full_shape.size());
          if (p.shard_dim < -1 || p.shard_dim >= rank_dims)
            po.fail("dim", std::to_string(p.shard_dim) + " is not -1 or a dimension of shape " + shape_label(p.full_shape));
          if (p.shard_dim >= 0) {
            const int64_t D = p.full_shape[static_cast<size_t>(p.shard_dim)];
            if (p.shard_start < 0 || p.shard_len < 1 || p.shard_start + p.shard_len > D)
              po.fail("len", "slice [" + std::to_string(p.shard_start) + ", " + std::to_string(p.shard_start + p.shard_len) +
                                 ") outside dimension " + std::to_string(p.shard_dim) + " of size " + std::to_string(D));
          }
          const int64_t slice = p.shard_dim >= 0 ? product(p.full_shape) / p.full_shape[static_cast<size_t>(p.shard_dim)] * p.shard_len
                                                 : product(p.full_shape);
          if (p.local_begin < 0 || p.count < 1 || p.local_begin + p.count > slice)
            po.fail("count", "elements [" + std::to_string(p.local_begin) + ", " + std::to_string(p.local_begin + p.count) +
                                 ") outside the slice of " + std::to_string(slice));
          if (p.offset < 0 || p.offset + p.count > e.numel)
            po.fail("offset", "[" + std::to_string(p.offset) + ", " + std::to_string(p.offset + p.count) +
                                  ") outside the entry of " + std::to_string(e.numel));
          e.pieces.push_back(std::move(p));
        }
        entries.push_back(std::move(e));
      }
      idx.ranks.push_back(std::move(entries));
    }
    return idx;
  });
}

IndexCoverage index_coverage(const CheckpointIndex& idx) {
  IndexCoverage c;
  for (const auto& [name, t] : sources_of(idx)) {
    c.tensors.emplace_back(name, t.shape);
    const int64_t n = product(t.shape);
    for (StateKind k : kKinds) {
      int64_t held = 0;
      for (const SourceRun& r : t.runs[static_cast<int>(k)]) held += r.count;
      if (held != n)
        c.gaps.push_back(name + " (" + entry_suffix(k) + "): " + std::to_string(n - held) + " of " + std::to_string(n) +
                         " elements missing");
    }
  }
  return c;
}

Result<std::vector<EntryFill>> reshard_rank(const CheckpointIndex& from, const Plan& next, int rank, int prefer) {
  const std::map<std::string, TensorSources> src = sources_of(from, prefer);
  // The two must hold the same tensors: every tensor of the next plan's model (the first rank of
  // each stage holds one slice of each of its tensors) against every tensor of the checkpoint.
  std::set<std::string> wanted;
  const int S = next.devices_per_stage();
  for (int st = 0; st < next.train.pp; ++st)
    for (const UnitSpec& u : unit_specs(next, st * S))
      for (const ParamSpec& ps : u.params) wanted.insert(ps.name);
  for (const auto& [name, t] : src)
    if (!wanted.count(name))
      return Error{ErrorKind::kBadInput, "checkpoint holds " + name + " " + shape_label(t.shape) +
                                             ", which the plan's model (" + next.model.name + ") lacks"};
  std::vector<EntryFill> out;
  for (const SavedEntry& e : saved_entries(next, rank)) {
    EntryFill f;
    f.name = e.name;
    f.numel = e.numel;
    for (const SavedPiece& p : e.pieces) {
      auto it = src.find(p.param);
      if (it == src.end())
        return Error{ErrorKind::kBadInput, "checkpoint has no " + p.param + " " + shape_label(p.full_shape) +
                                               ", which the plan's model (" + next.model.name + ") holds"};
      if (it->second.shape != p.full_shape)
        return Error{ErrorKind::kBadInput, p.param + ": the checkpoint's is " + shape_label(it->second.shape) +
                                               ", the plan's model's " + shape_label(p.full_shape)};
      const std::vector<SourceRun>& runs = it->second.runs[static_cast<int>(e.kind)];
      Status missing;
      for_each_run(p, [&](int64_t fb, int64_t po, int64_t len) {
        int64_t a = fb;
        const int64_t b = fb + len;
        // The first run ending after a.
        auto r = std::upper_bound(runs.begin(), runs.end(), a,
                                  [](int64_t x, const SourceRun& s) { return x < s.begin + s.count; });
        while (a < b) {
          if (r == runs.end() || r->begin > a) {
            if (missing.ok())
              missing = Error{ErrorKind::kIo, "checkpoint lacks elements [" + std::to_string(a) + ", " +
                                                  std::to_string(r == runs.end() ? b : std::min(b, r->begin)) + ") of " +
                                                  p.param + " (" + entry_suffix(e.kind) + ")"};
            return;
          }
          const int64_t end = std::min(b, r->begin + r->count);
          const EntryCopy c{r->rank, r->entry, r->offset + (a - r->begin), p.offset + po + (a - fb), end - a};
          if (!f.copies.empty()) {
            EntryCopy& l = f.copies.back();
            if (l.src_rank == c.src_rank && l.src_entry == c.src_entry && l.src_offset + l.count == c.src_offset &&
                l.dst_offset + l.count == c.dst_offset) {
              l.count += c.count;
              a = end;
              ++r;
              continue;
            }
          }
          f.copies.push_back(c);
          a = end;
          ++r;
        }
      });
      if (!missing.ok()) return missing.error();
    }
    out.push_back(std::move(f));
  }
  return out;
}

Result<int64_t> reshard_bytes_moved(const Plan& a, const Plan& b) {
  const CheckpointIndex idx = checkpoint_index(a);
  int64_t values = 0;
  for (int r = 0; r < b.world_size(); ++r) {
    auto fills = reshard_rank(idx, b, r, r);
    if (!fills.ok()) return fills.error();
    for (const EntryFill& f : *fills)
      for (const EntryCopy& c : f.copies)
        if (c.src_rank != r) values += c.count;
  }
  return values * static_cast<int64_t>(sizeof(float));
}

Result<std::vector<float>> fill_entry(const CheckpointIndex& from, const EntryFill& fill,
                                      const std::function<Result<const std::vector<float>*>(int, int)>& source) {
  std::vector<float> out(static_cast<size_t>(fill.numel), 0.0f);
  for (const EntryCopy& c : fill.copies) {
    auto s = source(c.src_rank, c.src_entry);
    if (!s.ok()) return s.error();
    const SavedEntry& se = from.ranks[static_cast<size_t>(c.src_rank)][static_cast<size_t>(c.src_entry)];
    const std::vector<float>& v = **s;
    if (static_cast<int64_t>(v.size()) != se.numel)
      return Error{ErrorKind::kIo, "rank " + std::to_string(c.src_rank) + "'s " + se.name + " holds " +
                                       std::to_string(v.size()) + " values, its index says " + std::to_string(se.numel)};
    std::copy_n(v.begin() + c.src_offset, c.count, out.begin() + c.dst_offset);
  }
  return out;
}

}  // namespace weft
