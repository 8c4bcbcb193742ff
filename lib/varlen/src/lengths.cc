#include "weft/varlen/lengths.h"

#include "weft/core/indexed_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <numeric>
#include <random>

#include "weft/core/indexed_dataset.h"

namespace weft::varlen {
namespace {

Error bad(const std::string& m) { return Error{ErrorKind::kBadInput, m}; }

}  // namespace

Result<std::vector<std::int64_t>> read_lengths(const std::string& path) {
  std::ifstream in(path);
  if (!in) return bad("--lengths " + path + ": cannot open the file");
  std::vector<std::int64_t> out;
  std::string line;
  std::int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    size_t a = line.find_first_not_of(" \t\r");
    if (a == std::string::npos || line[a] == '#') continue;
    size_t b = line.find_last_not_of(" \t\r");
    const std::string field = line.substr(a, b - a + 1);
    const std::string where = "--lengths " + path + ", line " + std::to_string(n) + ": ";
    errno = 0;
    char* end = nullptr;
    const long long v = std::strtoll(field.c_str(), &end, 10);
    if (end == field.c_str() || *end != '\0' || errno == ERANGE)
      return bad(where + "\"" + field + "\" is not an integer length");
    if (v <= 0) return bad(where + "length " + field + " is not positive");
    out.push_back(v);
  }
  if (out.empty()) return bad("--lengths " + path + ": no lengths in the file");
  return out;
}

Result<std::vector<std::int64_t>> document_lengths(const std::string& path, std::int64_t eos, const std::string& format) {
  int width = 0;
  if (format == "uint16" || (format == "auto" && (path.ends_with(".bin") || path.ends_with(".u16")))) width = 2;
  else if (format == "uint32" || (format == "auto" && path.ends_with(".u32"))) width = 4;
  else
    return bad("--data " + path + ": a token file is uint16 (.bin, .u16) or uint32 (.u32); format \"" + format +
               "\" does not say which");
  if (eos < 0 || (width == 2 && eos > 65535))
    return bad("--eos " + std::to_string(eos) + ": not a " + (width == 2 ? "uint16" : "uint32") + " token id");
  std::ifstream in(path, std::ios::binary);
  if (!in) return bad("--data " + path + ": cannot open the file");
  std::vector<std::int64_t> out;
  std::int64_t run = 0, read = 0;
  std::vector<unsigned char> buf(1 << 16);
  while (in) {
    in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got <= 0) break;
    for (std::streamsize i = 0; i + width <= got; i += width) {
      std::uint32_t id = buf[i] | (buf[i + 1] << 8);
      if (width == 4) id |= (static_cast<std::uint32_t>(buf[i + 2]) << 16) | (static_cast<std::uint32_t>(buf[i + 3]) << 24);
      ++run;
      if (static_cast<std::int64_t>(id) == eos) {
        out.push_back(run);
        run = 0;
      }
    }
    read += got;
  }
  if (read % width != 0)
    return bad("--data " + path + ": " + std::to_string(read) + " bytes is not a whole number of " +
               std::to_string(width) + "-byte token ids");
  if (run > 0) out.push_back(run);
  if (out.empty()) return bad("--data " + path + ": the file holds no tokens");
  return out;
}

Result<std::vector<std::int64_t>> indexed_document_lengths(const std::string& path) {
  auto ds = read_indexed_dataset(path);
  if (!ds.ok()) return ds.error().with_context("--data");
  std::vector<std::int64_t> out = ds->document_spans().length;
  if (out.empty()) return bad("--data " + path + ": the dataset holds no tokens");
  return out;
}

Result<std::vector<std::int64_t>> load_documents(const std::string& lengths_path, const std::string& data_path,
                                                 std::int64_t eos, const std::string& format) {
  if (lengths_path.empty() == data_path.empty())
    return bad(lengths_path.empty() ? "give the document lengths as --lengths FILE or as --data TOKENS --eos ID"
                                    : "give the document lengths as --lengths FILE or as --data TOKENS --eos ID, not both");
  if (!lengths_path.empty()) return read_lengths(lengths_path);
  if (format == "megatron" || (format == "auto" && is_indexed_dataset(data_path))) {
    if (eos >= 0)
      return bad("--eos " + std::to_string(eos) + ": the documents of --data " + data_path +
                 " (a Megatron dataset) come from its index; drop --eos");
    return indexed_document_lengths(data_path);
  }
  if (eos < 0) return bad("--data " + data_path + ": --eos ID names the end-of-document token");
  return document_lengths(data_path, eos, format);
}

Result<Batches> draw_batches(const std::vector<std::int64_t>& lengths, int global_batch, int steps, int first_step,
                             std::int64_t max_seq, std::uint64_t seed) {
  if (global_batch <= 0) return bad("--global-batch " + std::to_string(global_batch) + ": must be positive");
  if (steps <= 0) return bad("--steps " + std::to_string(steps) + ": must be positive");
  if (first_step < 0) return bad("--first-step " + std::to_string(first_step) + ": must not be negative");
  if (max_seq < 0) return bad("--max-seq " + std::to_string(max_seq) + ": must not be negative");
  std::vector<std::size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), 0);
  if (seed != 0) {
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
  }
  Batches b;
  std::vector<std::int64_t> cur;
  int batch = 0;
  for (std::size_t i : order) {
    const std::int64_t s = lengths[i];
    if (max_seq > 0 && s > max_seq) {
      if (batch >= first_step) ++b.dropped;
      continue;
    }
    cur.push_back(s);
    if (static_cast<int>(cur.size()) == global_batch) {
      if (batch >= first_step) {
        for (std::int64_t x : cur) b.longest = std::max(b.longest, x);
        b.steps.push_back(std::move(cur));
      }
      cur.clear();
      ++batch;
      if (static_cast<int>(b.steps.size()) == steps) break;
    }
  }
  if (static_cast<int>(b.steps.size()) < steps) {
    const std::int64_t kept =
        std::count_if(lengths.begin(), lengths.end(), [&](std::int64_t x) { return max_seq == 0 || x <= max_seq; });
    return bad("the lengths hold " + std::to_string(kept) + " documents within --max-seq, fewer than " +
               std::to_string(static_cast<std::int64_t>(first_step + steps) * global_batch) + " for --first-step " +
               std::to_string(first_step) + " and --steps " + std::to_string(steps) + " of --global-batch " +
               std::to_string(global_batch));
  }
  return b;
}

}  // namespace weft::varlen
