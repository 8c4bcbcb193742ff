#include "weft/core/indexed_dataset.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <iterator>

namespace weft {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr std::size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;

bool file_size(const std::string& path, std::int64_t* bytes) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  *bytes = static_cast<std::int64_t>(st.st_size);
  return true;
}

template <class T>
T load(const std::vector<char>& b, std::size_t at) {
  T v;
  std::memcpy(&v, b.data() + at, sizeof(T));
  return v;
}

struct DType {
  int code;
  const char* name;
  int bytes;
  bool is_signed;
  bool integer;
};
constexpr DType kDTypes[] = {{1, "uint8", 1, false, true},  {2, "int8", 1, true, true},
                             {3, "int16", 2, true, true},   {4, "int32", 4, true, true},
                             {5, "int64", 8, true, true},   {6, "float64", 8, true, false},
                             {7, "float32", 4, true, false}, {8, "uint16", 2, false, true}};

const DType* dtype_of(int code) {
  for (const DType& d : kDTypes)
    if (d.code == code) return &d;
  return nullptr;
}

}  // namespace

TokenSpans IndexedDataset::document_spans() const {
  TokenSpans out;
  for (std::int64_t d = 0; d < documents(); ++d) {
    const std::int64_t first = document_indices[d];
    std::int64_t n = 0;
    for (std::int64_t s = first; s < document_indices[d + 1]; ++s) n += sequence_lengths[s];
    if (n == 0) continue;
    out.start.push_back(sequence_pointers[first] / item_bytes);
    out.length.push_back(n);
  }
  return out;
}

std::string IndexedDataset::dtype_name() const {
  const DType* d = dtype_of(dtype_code);
  return d ? d->name : "?";
}

std::string indexed_dataset_prefix(const std::string& path) {
  if (path.ends_with(".idx") || path.ends_with(".bin")) return path.substr(0, path.size() - 4);
  return path;
}

bool is_indexed_dataset(const std::string& path) {
  const std::string p = indexed_dataset_prefix(path);
  std::int64_t b = 0;
  return file_size(p + ".idx", &b) && file_size(p + ".bin", &b);
}

Result<IndexedDataset> read_indexed_dataset(const std::string& path) {
  IndexedDataset ds;
  ds.prefix = indexed_dataset_prefix(path);
  const std::string idx = ds.prefix + ".idx", bin = ds.prefix + ".bin";
  auto bad = [&](const std::string& m) { return Error{ErrorKind::kBadInput, idx + ": " + m}; };
  std::int64_t idx_bytes = 0;
  if (!file_size(idx, &idx_bytes))
    return Error{ErrorKind::kIo, idx + ": cannot open the index of the Megatron dataset " + ds.prefix};
  if (!file_size(bin, &ds.bin_bytes))
    return Error{ErrorKind::kIo, bin + ": cannot open the data file of the Megatron dataset " + ds.prefix};
  std::ifstream in(idx, std::ios::binary);
  if (!in) return Error{ErrorKind::kIo, idx + ": cannot read"};
  std::vector<char> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (static_cast<std::int64_t>(b.size()) != idx_bytes) return Error{ErrorKind::kIo, idx + ": short read"};
  if (b.size() < kHeaderBytes)
    return bad(std::to_string(b.size()) + " bytes, shorter than the " + std::to_string(kHeaderBytes) +
               "-byte header of a Megatron index");
  if (std::memcmp(b.data(), kMagic, sizeof kMagic) != 0)
    return bad("not a Megatron indexed dataset index (its first 9 bytes are not \"MMIDIDX\\0\\0\")");
  const auto version = load<std::uint64_t>(b, 9);
  if (version != 1) return bad("index version " + std::to_string(version) + "; weft reads version 1");
  ds.dtype_code = static_cast<unsigned char>(b[17]);
  const DType* dt = dtype_of(ds.dtype_code);
  if (!dt) return bad("dtype code " + std::to_string(ds.dtype_code) + " is none of Megatron's (1-8)");
  if (!dt->integer) return bad("dtype " + std::string(dt->name) + ": token ids are integers");
  ds.item_bytes = dt->bytes;
  ds.is_signed = dt->is_signed;
  const auto S = load<std::uint64_t>(b, 18), D = load<std::uint64_t>(b, 26);
  const std::uint64_t rest = b.size() - kHeaderBytes;
  // Counts from a damaged file can be anything: check them against the size before multiplying.
  if (S > rest / 12 || D > rest / 8 || 12 * S + 8 * D > rest)
    return bad(std::to_string(S) + " sequences and " + std::to_string(D) + " document indices need " +
               (S > rest || D > rest ? std::string("more") : std::to_string(kHeaderBytes + 12 * S + 8 * D)) +
               " bytes but the file has " + std::to_string(b.size()));
  const std::uint64_t need = kHeaderBytes + 12 * S + 8 * D;
  if (b.size() == need + S && S > 0)
    return bad("holds a mode per sequence (a multimodal dataset); weft reads text datasets");
  if (b.size() != need)
    return bad(std::to_string(S) + " sequences and " + std::to_string(D) + " document indices need " +
               std::to_string(need) + " bytes but the file has " + std::to_string(b.size()));
  if (D < 1) return bad("no document indices (a Megatron index holds at least the 0 that starts them)");
  ds.sequence_lengths.resize(S);
  ds.sequence_pointers.resize(S);
  ds.document_indices.resize(D);
  std::size_t at = kHeaderBytes;
  for (std::uint64_t i = 0; i < S; ++i, at += 4) ds.sequence_lengths[i] = load<std::int32_t>(b, at);
  for (std::uint64_t i = 0; i < S; ++i, at += 8) ds.sequence_pointers[i] = load<std::int64_t>(b, at);
  for (std::uint64_t i = 0; i < D; ++i, at += 8) ds.document_indices[i] = load<std::int64_t>(b, at);
  std::int64_t next = 0;  // where sequence i must start
  for (std::uint64_t i = 0; i < S; ++i) {
    const std::string seq = "sequence " + std::to_string(i);
    const std::int64_t len = ds.sequence_lengths[i], ptr = ds.sequence_pointers[i];
    if (len < 0) return bad(seq + ": length " + std::to_string(len));
    if (ptr != next)
      return bad(seq + " starts at byte " + std::to_string(ptr) + " of " + bin + ", not right after the sequence "
                 "before (byte " + std::to_string(next) + "); weft reads datasets stored back to back, as Megatron's "
                 "preprocessing and merge write them");
    next = ptr + len * ds.item_bytes;
    if (next > ds.bin_bytes)
      return bad(seq + " (" + std::to_string(len) + " tokens at byte " + std::to_string(ptr) + ") points past the end of " +
                 bin + " (" + std::to_string(ds.bin_bytes) + " bytes)");
  }
  if (next != ds.bin_bytes)
    return bad("its " + std::to_string(S) + " sequences hold " + std::to_string(next) + " bytes but " + bin + " has " +
               std::to_string(ds.bin_bytes) + " (truncated, or the index of another file)");
  if (ds.document_indices.front() != 0)
    return bad("document index 0 is " + std::to_string(ds.document_indices.front()) + ", not 0");
  if (ds.document_indices.back() != static_cast<std::int64_t>(S))
    return bad("the last document index is " + std::to_string(ds.document_indices.back()) + ", not the " +
               std::to_string(S) + " sequences");
  for (std::uint64_t d = 1; d < D; ++d)
    if (ds.document_indices[d] < ds.document_indices[d - 1])
      return bad("document index " + std::to_string(d) + " (" + std::to_string(ds.document_indices[d]) +
                 ") goes back from " + std::to_string(ds.document_indices[d - 1]));
  return ds;
}

}  // namespace weft
