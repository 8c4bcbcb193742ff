#include "weft/plan/checkpoint_layout.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

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

// Where a piece's slice lies in its full tensor: element j of the slice (row-major within it) is
// element full(j) of the tensor, and the slice is contiguous there for `block` elements at a time
// (one index of the dimensions before the sliced one; the whole slice when it is the whole tensor).
struct SliceMap {
  int64_t block = 0, full_block = 0, start = 0;
  explicit SliceMap(const SavedPiece& p) {
    if (p.shard_dim < 0) {
      block = full_block = product(p.full_shape);
      return;
    }
    const int64_t inner = product(p.full_shape, static_cast<size_t>(p.shard_dim) + 1);
    block = p.shard_len * inner;
    full_block = p.full_shape[static_cast<size_t>(p.shard_dim)] * inner;
    start = p.shard_start * inner;
  }
  int64_t full(int64_t j) const { return j / block * full_block + start + j % block; }
};

// Calls f(full_begin, piece_offset, len) for every contiguous run of the full tensor that the piece
// covers, in order (piece_offset: from the piece's first element).
template <class F>
void for_each_run(const SavedPiece& p, F f) {
  const SliceMap m(p);
  const int64_t end = p.local_begin + p.count;
  for (int64_t j = p.local_begin; j < end;) {
    const int64_t len = std::min(end - j, m.block - j % m.block);
    f(m.full(j), j - p.local_begin, len);
    j += len;
  }
}

// A piece of the checkpoint and where it is.
struct Source {
  int rank = 0, entry = 0;
  const SavedPiece* piece = nullptr;
};

// Every piece of every tensor the checkpoint holds, per state, in rank order (pointers into idx).
struct TensorPieces {
  std::vector<int64_t> shape;
  std::vector<Source> by_kind[3];
};
std::map<std::string, TensorPieces> pieces_by_tensor(const CheckpointIndex& idx) {
  std::map<std::string, TensorPieces> out;
  for (int r = 0; r < static_cast<int>(idx.ranks.size()); ++r) {
    const auto& entries = idx.ranks[static_cast<size_t>(r)];
    for (int e = 0; e < static_cast<int>(entries.size()); ++e) {
      const SavedEntry& en = entries[static_cast<size_t>(e)];
      for (const SavedPiece& p : en.pieces) {
        TensorPieces& t = out[p.param];
        t.shape = p.full_shape;
        t.by_kind[static_cast<int>(en.kind)].push_back({r, e, &p});
      }
    }
  }
  return out;
}

// Whether two pieces of one tensor may share elements: their full-tensor spans overlap and, where
// both slice the same dimension, so do their slices.
bool may_overlap(const SavedPiece& a, const SavedPiece& b) {
  if (a.shard_dim >= 0 && a.shard_dim == b.shard_dim &&
      (a.shard_start + a.shard_len <= b.shard_start || b.shard_start + b.shard_len <= a.shard_start))
    return false;
  const SliceMap ma(a), mb(b);
  const int64_t a0 = ma.full(a.local_begin), a1 = ma.full(a.local_begin + a.count - 1) + 1;
  const int64_t b0 = mb.full(b.local_begin), b1 = mb.full(b.local_begin + b.count - 1) + 1;
  return a0 < b1 && b0 < a1;
}

// Elements a filled entry still needs: full-tensor run [begin, begin + count) to dst in the entry.
struct Want {
  int64_t begin = 0, count = 0, dst = 0;
};

// Takes from `wants` (sorted, non-overlapping) what source piece s holds, appending the copies to
// `out`; returns what remains wanted.
std::vector<Want> take(const std::vector<Want>& wants, const Source& s, std::vector<EntryCopy>& out) {
  struct Run {
    int64_t begin, end, offset;
  };
  std::vector<Run> runs;
  for_each_run(*s.piece, [&](int64_t fb, int64_t po, int64_t len) { runs.push_back({fb, fb + len, s.piece->offset + po}); });
  auto emit = [&](EntryCopy c) {
    if (!out.empty()) {
      EntryCopy& l = out.back();
      if (l.src_rank == c.src_rank && l.src_entry == c.src_entry && l.src_offset + l.count == c.src_offset &&
          l.dst_offset + l.count == c.dst_offset) {
        l.count += c.count;
        return;
      }
    }
    out.push_back(c);
  };
  std::vector<Want> rest;
  size_t i = 0;
  for (const Want& w : wants) {
    int64_t a = w.begin;
    const int64_t b = w.begin + w.count;
    while (i < runs.size() && runs[i].end <= a) ++i;
    size_t k = i;
    while (a < b) {
      if (k == runs.size() || runs[k].begin >= b) {
        rest.push_back({a, b - a, w.dst + (a - w.begin)});
        break;
      }
      if (runs[k].begin > a) {
        rest.push_back({a, runs[k].begin - a, w.dst + (a - w.begin)});
        a = runs[k].begin;
      }
      const int64_t e = std::min(b, runs[k].end);
      emit({s.rank, s.entry, runs[k].offset + (a - runs[k].begin), w.dst + (a - w.begin), e - a});
      a = e;
      if (e == runs[k].end) ++k;
    }
  }
  return rest;
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
  for (const auto& [name, t] : pieces_by_tensor(idx)) {
    c.tensors.emplace_back(name, t.shape);
    const int64_t n = product(t.shape);
    for (StateKind k : kKinds) {
      // Replicas list the same slice again: each distinct piece once, then the union of its runs.
      std::set<std::tuple<int, int64_t, int64_t, int64_t, int64_t>> seen;
      std::vector<std::pair<int64_t, int64_t>> runs;
      for (const Source& s : t.by_kind[static_cast<int>(k)]) {
        const SavedPiece& p = *s.piece;
        if (!seen.insert({p.shard_dim, p.shard_start, p.shard_len, p.local_begin, p.count}).second) continue;
        for_each_run(p, [&](int64_t fb, int64_t, int64_t len) { runs.emplace_back(fb, fb + len); });
      }
      std::sort(runs.begin(), runs.end());
      int64_t held = 0, covered = 0;
      for (const auto& [b, e] : runs) {
        if (e <= covered) continue;
        held += e - std::max(b, covered);
        covered = e;
      }
      if (held != n)
        c.gaps.push_back(name + " (" + entry_suffix(k) + "): " + std::to_string(n - held) + " of " + std::to_string(n) +
                         " elements missing");
    }
  }
  return c;
}

struct Resharder::Impl {
  std::map<std::string, TensorPieces> src;
};

Resharder::Resharder(const CheckpointIndex& from) : impl_(std::make_unique<Impl>()) {
  impl_->src = pieces_by_tensor(from);
}
Resharder::~Resharder() = default;

Result<std::vector<EntryFill>> reshard_rank(const CheckpointIndex& from, const Plan& next, int rank, int prefer) {
  return Resharder(from).rank(next, rank, prefer);
}

Result<std::vector<EntryFill>> Resharder::rank(const Plan& next, int rank, int prefer) const {
  const std::map<std::string, TensorPieces>& src = impl_->src;
  // The two must hold the same tensors: every tensor of the next plan's model against every tensor
  // of the checkpoint.
  std::set<std::string> wanted;
  for (const ParamSpec& ps : model_params(next)) wanted.insert(ps.name);
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
      const std::vector<Source>& cands = it->second.by_kind[static_cast<int>(e.kind)];
      // The common case first: a piece of the same slice whose elements contain the wanted ones
      // (the same layout, or ZeRO shards of a slice some rank holds whole) is one copy, `prefer`'s
      // if it has one, else the first rank's; unless `prefer` holds part of the elements in
      // another form, which the general path below takes from it.
      const Source* whole = nullptr;
      bool prefer_overlaps = false;
      for (const Source& s : cands) {
        const SavedPiece& q = *s.piece;
        const bool contains = q.shard_dim == p.shard_dim && q.shard_start == p.shard_start &&
                              q.shard_len == p.shard_len && q.local_begin <= p.local_begin &&
                              p.local_begin + p.count <= q.local_begin + q.count;
        if (contains && (s.rank == prefer || !whole)) whole = &s;
        if (s.rank == prefer && !contains && may_overlap(q, p)) prefer_overlaps = true;
      }
      if (whole && (whole->rank == prefer || !prefer_overlaps)) {
        f.copies.push_back({whole->rank, whole->entry, whole->piece->offset + (p.local_begin - whole->piece->local_begin),
                            p.offset, p.count});
        continue;
      }
      std::vector<Want> wants;
      for_each_run(p, [&](int64_t fb, int64_t po, int64_t len) { wants.push_back({fb, len, p.offset + po}); });
      // Candidates in order: `prefer`'s pieces, then every other rank's in rank order; each takes
      // what is still wanted, until nothing is (replicas after the first take nothing and are not
      // expanded).
      for (int pass = prefer >= 0 ? 0 : 1; pass < 2 && !wants.empty(); ++pass)
        for (const Source& s : cands) {
          if (wants.empty()) break;
          if ((pass == 0) != (s.rank == prefer) || !may_overlap(*s.piece, p)) continue;
          wants = take(wants, s, f.copies);
        }
      if (!wants.empty())
        return Error{ErrorKind::kIo, "checkpoint lacks elements [" + std::to_string(wants.front().begin) + ", " +
                                         std::to_string(wants.front().begin + wants.front().count) + ") of " + p.param +
                                         " (" + entry_suffix(e.kind) + ")"};
    }
    out.push_back(std::move(f));
  }
  return out;
}

Result<int64_t> reshard_bytes_moved(const Plan& a, const Plan& b) {
  const CheckpointIndex idx = checkpoint_index(a);
  const Resharder rs(idx);
  int64_t values = 0;
  for (int r = 0; r < b.world_size(); ++r) {
    auto fills = rs.rank(b, r, r);
    if (!fills.ok()) return fills.error();
    for (const EntryFill& f : *fills)
      for (const EntryCopy& c : f.copies)
        if (c.src_rank != r) values += c.count;
  }
  return values * static_cast<int64_t>(sizeof(float));
}

Result<std::vector<float>> entry_from_full(
    const SavedEntry& e, const std::function<Result<const std::vector<float>*>(const SavedPiece&)>& full) {
  std::vector<float> out(static_cast<size_t>(e.numel), 0.0f);
  for (const SavedPiece& p : e.pieces) {
    auto v = full(p);
    if (!v.ok()) return v.error();
    const std::vector<float>& src = *v.value();
    if (static_cast<int64_t>(src.size()) != product(p.full_shape))
      return Error{ErrorKind::kIo, p.param + ": " + std::to_string(src.size()) + " values for the shape " +
                                       shape_label(p.full_shape)};
    for_each_run(p, [&](int64_t fb, int64_t po, int64_t len) {
      std::copy_n(src.begin() + fb, len, out.begin() + p.offset + po);
    });
  }
  return out;
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
