// Token sources for training. Every sample is a pure function of (seed, step, global sample index),
// so a rank reads only the samples it trains on, runs are reproducible, and a resumed run sees
// exactly the samples an uninterrupted run would. Torch-free.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"
#include "weft/core/indexed_dataset.h"

namespace weft::runtime {

// Where the tokens come from.
enum class DataFormat {
  kSynthetic,  // generated: arithmetic progressions modulo the vocabulary (learnable, no file)
  kUint16,     // a file of little-endian uint16 token ids (nanoGPT's train.bin)
  kUint32,     // a file of little-endian uint32 token ids
  kText,       // any file read as bytes: token id = byte value (needs vocab >= 256)
  kMegatron,   // a Megatron-LM indexed dataset, PREFIX.idx + PREFIX.bin (weft/core/indexed_dataset.h):
               // the .bin's tokens in the index's dtype, documents from the index
};

const char* to_string(DataFormat f);
// "auto" picks from the file name: a PREFIX (or PREFIX.bin, PREFIX.idx) with both PREFIX.idx and
// PREFIX.bin beside it -> megatron; else *.bin / *.u16 -> uint16, *.u32 -> uint32, anything else ->
// text.
Result<DataFormat> data_format_from_string(const std::string& s, const std::string& path);

// Documents of a token file, each its first token and its length (weft train --varlen, docs/varlen.md).
using Documents = TokenSpans;

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Writes `len` tokens of sample `index` of optimizer step `step` into out. Throws InputError
  // (kIo or kBadInput) naming the file and offset if the data cannot be read or a token id is
  // >= the vocabulary.
  virtual void sample(std::int64_t step, std::int64_t index, std::int64_t len, std::int64_t* out) const = 0;
  virtual std::string describe() const = 0;
  // Tokens in the file (0: a synthetic source, which has none).
  virtual std::int64_t size() const { return 0; }
  // Tokens [offset, offset + len) of the file, checked as sample() checks them (a synthetic source
  // throws: it has no file).
  virtual void read(std::int64_t offset, std::int64_t len, std::int64_t* out) const;
  // The documents the file's own index gives (a Megatron dataset's); nullptr where the documents
  // are found by an end-of-document id (split_documents).
  virtual const Documents* indexed_documents() const { return nullptr; }
};

// A synthetic source: sample = (start + stride * i) mod vocab with start and stride drawn from a
// counter-based generator keyed by (seed, step, index).
std::unique_ptr<TokenSource> synthetic_source(std::int64_t vocab, std::uint64_t seed);

// A file source. Samples start at pseudo-random offsets keyed by (seed, step, index); the file is
// memory-mapped, so each rank touches only the pages of its own samples. A Megatron dataset's .bin
// is its documents' tokens back to back, read the same way (its index checked first: the reader's
// errors, prefixed with --data). Errors (kIo) if the file cannot be opened or holds fewer than
// len + 1 tokens; (kBadInput) if the vocabulary is too small for the format.
Result<std::unique_ptr<TokenSource>> file_source(const std::string& path, DataFormat f, std::int64_t vocab,
                                                 std::int64_t sample_len, std::uint64_t seed);

// The documents of a token file split at `eos`: a document ends with each `eos` id, which it holds;
// the tokens after the last `eos` are one more document. The same split as
// weft::varlen::document_lengths, so `weft varlen --data` plans the documents training reads.
// Errors (kBadInput) for a source without a file, an eos outside the vocabulary, or no document.
Result<Documents> split_documents(const TokenSource& src, std::int64_t eos);

// The documents of each optimizer step: `per_step` documents of at most `max_len` tokens (longer
// ones are left out and counted), in an order shuffled with `seed` afresh for every pass over the
// file. batch(step) is a pure function of the step (1-based), so every rank and a resumed run
// draw the same documents; it may be called from several threads.
class DocumentBatches {
 public:
  // Errors (kBadInput) when no document fits in max_len or per_step < 1.
  static Result<std::shared_ptr<const DocumentBatches>> make(const Documents& docs, int per_step,
                                                             std::int64_t max_len, std::uint64_t seed);
  std::vector<std::int64_t> batch(std::int64_t step) const;  // indices into the documents
  std::vector<std::int64_t> lengths(std::int64_t step) const;
  std::int64_t kept() const { return static_cast<std::int64_t>(kept_.size()); }
  std::int64_t dropped() const { return dropped_; }
  int per_step() const { return per_step_; }
  const Documents& documents() const { return docs_; }

 private:
  DocumentBatches() = default;
  const std::vector<std::int64_t>& epoch(std::int64_t e) const;  // the kept documents' order in pass e
  Documents docs_;
  std::vector<std::int64_t> kept_;
  std::int64_t dropped_ = 0;
  int per_step_ = 1;
  std::uint64_t seed_ = 0;
  mutable std::mutex mu_;
  mutable std::map<std::int64_t, std::vector<std::int64_t>> epochs_;  // the last two passes used
};

// SplitMix64 step: the counter-based mixer used for init seeds and sample positions.
std::uint64_t mix64(std::uint64_t x);

}  // namespace weft::runtime
