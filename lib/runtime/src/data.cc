#include "weft/runtime/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <algorithm>

namespace weft::runtime {

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

namespace {

std::uint64_t key(std::uint64_t seed, std::int64_t step, std::int64_t index) {
  return mix64(mix64(mix64(seed) ^ static_cast<std::uint64_t>(step)) ^ static_cast<std::uint64_t>(index));
}

class Synthetic final : public TokenSource {
 public:
  Synthetic(std::int64_t vocab, std::uint64_t seed) : vocab_(vocab), seed_(seed) {}
  void sample(std::int64_t step, std::int64_t index, std::int64_t len, std::int64_t* out) const override {
    const std::uint64_t k = key(seed_, step, index);
    const std::int64_t start = static_cast<std::int64_t>(k % static_cast<std::uint64_t>(vocab_));
    const std::int64_t max_stride = vocab_ > 8 ? 7 : vocab_ - 1;
    const std::int64_t stride = max_stride > 0 ? 1 + static_cast<std::int64_t>((k >> 32) % max_stride) : 0;
    for (std::int64_t i = 0; i < len; ++i) out[i] = (start + stride * i) % vocab_;
  }
  std::string describe() const override {
    return "synthetic arithmetic sequences over vocab " + std::to_string(vocab_);
  }

 private:
  std::int64_t vocab_;
  std::uint64_t seed_;
};

// The element type of a mapped file's tokens.
struct Element {
  int bytes = 1;
  bool is_signed = false;
};

Element element_of(DataFormat f) {
  switch (f) {
    case DataFormat::kUint16: return {2, false};
    case DataFormat::kUint32: return {4, false};
    default: return {1, false};
  }
}

class MappedFile final : public TokenSource {
 public:
  MappedFile(std::string path, DataFormat f, Element el, std::int64_t vocab, std::uint64_t seed, const void* base,
             std::size_t bytes, std::int64_t tokens)
      : path_(std::move(path)), f_(f), el_(el), vocab_(vocab), seed_(seed), base_(base), bytes_(bytes), tokens_(tokens) {}
  ~MappedFile() override {
    if (base_ && bytes_) munmap(const_cast<void*>(base_), bytes_);
  }
  void sample(std::int64_t step, std::int64_t index, std::int64_t len, std::int64_t* out) const override {
    if (len > tokens_)
      throw InputError(path_ + ": a sample needs " + std::to_string(len) + " tokens but the file holds " +
                           std::to_string(tokens_),
                       ErrorKind::kIo);
    const std::uint64_t span = static_cast<std::uint64_t>(tokens_ - len + 1);
    read(static_cast<std::int64_t>(key(seed_, step, index) % span), len, out);
  }
  std::int64_t size() const override { return tokens_; }
  void read(std::int64_t off, std::int64_t len, std::int64_t* out) const override {
    if (off < 0 || len < 0 || off + len > tokens_)
      throw InputError(path_ + ": tokens [" + std::to_string(off) + ", " + std::to_string(off + len) +
                           ") lie outside the file's " + std::to_string(tokens_),
                       ErrorKind::kIo);
    const unsigned char* at = static_cast<const unsigned char*>(base_) + el_.bytes * off;
    for (std::int64_t i = 0; i < len; ++i, at += el_.bytes) {
      std::uint64_t raw = 0;
      std::memcpy(&raw, at, el_.bytes);  // little-endian: the low bytes
      std::int64_t t = static_cast<std::int64_t>(raw);
      if (el_.is_signed && el_.bytes < 8 && (raw >> (8 * el_.bytes - 1)) != 0)
        t = static_cast<std::int64_t>(raw | (~std::uint64_t{0} << (8 * el_.bytes)));  // sign-extend
      if (t < 0 || t >= vocab_)
        throw InputError(path_ + ": token id " + std::to_string(t) + " at token offset " + std::to_string(off + i) +
                         (t < 0 ? " is negative" : " is >= the model's vocabulary of " + std::to_string(vocab_)));
      out[i] = t;
    }
  }
  const Documents* indexed_documents() const override { return docs_.start.empty() ? nullptr : &docs_; }
  void set_documents(Documents d) { docs_ = std::move(d); }
  std::string describe() const override {
    return path_ + " (" + to_string(f_) + ", " + std::to_string(tokens_) + " tokens" +
           (docs_.start.empty() ? std::string() : ", " + std::to_string(docs_.start.size()) + " documents") + ")";
  }

 private:
  std::string path_;
  DataFormat f_;
  Element el_;
  std::int64_t vocab_;
  std::uint64_t seed_;
  const void* base_;
  std::size_t bytes_;
  std::int64_t tokens_;
  Documents docs_;  // a Megatron dataset's, from its index
};

}  // namespace

void TokenSource::read(std::int64_t, std::int64_t, std::int64_t*) const {
  throw InputError(describe() + ": has no file to read documents from");
}

Result<Documents> split_documents(const TokenSource& src, std::int64_t eos) {
  if (const Documents* d = src.indexed_documents()) return *d;
  const std::int64_t n = src.size();
  if (n == 0) return Error{ErrorKind::kBadInput, "--varlen reads documents from a token file: give --data FILE"};
  if (eos < 0) return Error{ErrorKind::kBadInput, "--eos " + std::to_string(eos) + ": must be a token id (>= 0)"};
  Documents d;
  std::vector<std::int64_t> buf(1 << 16);
  std::int64_t begin = 0;
  for (std::int64_t at = 0; at < n; at += static_cast<std::int64_t>(buf.size())) {
    const std::int64_t len = std::min<std::int64_t>(static_cast<std::int64_t>(buf.size()), n - at);
    try {
      src.read(at, len, buf.data());
    } catch (const InputError& e) {
      return Error{e.kind, std::string("--data ") + e.what()};
    }
    for (std::int64_t i = 0; i < len; ++i)
      if (buf[i] == eos) {
        d.start.push_back(begin);
        d.length.push_back(at + i + 1 - begin);
        begin = at + i + 1;
      }
  }
  if (begin < n) {
    d.start.push_back(begin);
    d.length.push_back(n - begin);
  }
  return d;
}

Result<std::shared_ptr<const DocumentBatches>> DocumentBatches::make(const Documents& docs, int per_step,
                                                                      std::int64_t max_len, std::uint64_t seed) {
  if (per_step < 1)
    return Error{ErrorKind::kBadInput, "--global-batch " + std::to_string(per_step) + ": must be at least 1 document"};
  std::shared_ptr<DocumentBatches> b(new DocumentBatches());
  b->docs_ = docs;
  b->per_step_ = per_step;
  b->seed_ = seed;
  std::int64_t longest = 0;
  for (size_t i = 0; i < docs.length.size(); ++i) {
    longest = std::max(longest, docs.length[i]);
    if (docs.length[i] <= max_len) b->kept_.push_back(static_cast<std::int64_t>(i));
    else ++b->dropped_;
  }
  if (b->kept_.empty())
    return Error{ErrorKind::kBadInput, "--data: none of its " + std::to_string(docs.length.size()) +
                                           " documents (the shortest longer than the longest, " +
                                           std::to_string(longest) + " tokens) fits in the sequence length " +
                                           std::to_string(max_len)};
  return std::shared_ptr<const DocumentBatches>(std::move(b));
}

const std::vector<std::int64_t>& DocumentBatches::epoch(std::int64_t e) const {
  auto it = epochs_.find(e);
  if (it != epochs_.end()) return it->second;
  while (epochs_.size() >= 2) epochs_.erase(epochs_.begin());
  std::vector<std::int64_t> order = kept_;
  std::mt19937_64 rng(mix64(seed_ ^ static_cast<std::uint64_t>(e)));
  std::shuffle(order.begin(), order.end(), rng);
  return epochs_.emplace(e, std::move(order)).first->second;
}

std::vector<std::int64_t> DocumentBatches::batch(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::int64_t k = kept();
  std::vector<std::int64_t> out;
  out.reserve(per_step_);
  for (std::int64_t j = 0; j < per_step_; ++j) {
    const std::int64_t at = (step - 1) * per_step_ + j;
    out.push_back(epoch(at / k)[at % k]);
  }
  return out;
}

std::vector<std::int64_t> DocumentBatches::lengths(std::int64_t step) const {
  std::vector<std::int64_t> out;
  for (std::int64_t i : batch(step)) out.push_back(docs_.length[i]);
  return out;
}

const char* to_string(DataFormat f) {
  switch (f) {
    case DataFormat::kSynthetic: return "synthetic";
    case DataFormat::kUint16: return "uint16";
    case DataFormat::kUint32: return "uint32";
    case DataFormat::kText: return "text";
    case DataFormat::kMegatron: return "megatron";
  }
  return "?";
}

Result<DataFormat> data_format_from_string(const std::string& s, const std::string& path) {
  if (s == "uint16") return DataFormat::kUint16;
  if (s == "uint32") return DataFormat::kUint32;
  if (s == "text") return DataFormat::kText;
  if (s == "synthetic") return DataFormat::kSynthetic;
  if (s == "megatron") return DataFormat::kMegatron;
  if (s == "auto") {
    if (path.empty()) return DataFormat::kSynthetic;
    if (is_indexed_dataset(path)) return DataFormat::kMegatron;
    if (path.ends_with(".bin") || path.ends_with(".u16")) return DataFormat::kUint16;
    if (path.ends_with(".u32")) return DataFormat::kUint32;
    return DataFormat::kText;
  }
  return Error{ErrorKind::kBadInput,
               "--data-format: unknown value \"" + s + "\" (expected auto, uint16, uint32, text, megatron or synthetic)"};
}

std::unique_ptr<TokenSource> synthetic_source(std::int64_t vocab, std::uint64_t seed) {
  return std::make_unique<Synthetic>(vocab, seed);
}

Result<std::unique_ptr<TokenSource>> file_source(const std::string& path, DataFormat f, std::int64_t vocab,
                                                 std::int64_t sample_len, std::uint64_t seed) {
  if (f == DataFormat::kSynthetic) return synthetic_source(vocab, seed);
  if (f == DataFormat::kText && vocab < 256)
    return Error{ErrorKind::kBadInput, "--data " + path + ": a text file is read as bytes (ids 0..255) but the "
                                           "model's vocabulary is " + std::to_string(vocab)};
  if (f == DataFormat::kUint16 && vocab > 65536)
    return Error{ErrorKind::kBadInput, "--data " + path + ": uint16 token ids cannot address the model's vocabulary of " +
                                           std::to_string(vocab) + " (use --data-format uint32)"};
  std::string file = path;
  Element el = element_of(f);
  Documents docs;
  if (f == DataFormat::kMegatron) {
    auto ds = read_indexed_dataset(path);
    if (!ds.ok()) return ds.error().with_context("--data");
    file = ds->prefix + ".bin";
    el = {ds->item_bytes, ds->is_signed};
    docs = ds->document_spans();
  }
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{ErrorKind::kIo, "--data " + file + ": cannot open: " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Error{ErrorKind::kIo, "--data " + file + ": cannot stat: " + std::strerror(e)};
  }
  const std::size_t bytes = static_cast<std::size_t>(st.st_size);
  const int width = el.bytes;
  const std::int64_t tokens = static_cast<std::int64_t>(bytes / width);
  if (bytes % width != 0) {
    ::close(fd);
    return Error{ErrorKind::kBadInput, "--data " + file + ": size " + std::to_string(bytes) +
                                           " bytes is not a multiple of " + std::to_string(width) + " (format " +
                                           to_string(f) + ")"};
  }
  if (tokens < sample_len) {
    ::close(fd);
    return Error{ErrorKind::kIo, "--data " + file + ": holds " + std::to_string(tokens) + " tokens but one sample needs " +
                                     std::to_string(sample_len) + " (sequence length + 1)"};
  }
  void* base = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (base == MAP_FAILED) return Error{ErrorKind::kIo, "--data " + file + ": cannot map: " + std::strerror(e)};
  auto src = std::make_unique<MappedFile>(file, f, el, vocab, seed, base, bytes, tokens);
  if (f == DataFormat::kMegatron) {
    if (docs.start.empty()) return Error{ErrorKind::kBadInput, "--data " + path + ": the dataset holds no tokens"};
    src->set_documents(std::move(docs));
  }
  return std::unique_ptr<TokenSource>(std::move(src));
}

}  // namespace weft::runtime
