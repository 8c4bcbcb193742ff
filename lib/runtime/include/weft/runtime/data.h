// Token sources for training. Every sample is a pure function of (seed, step, global sample index),
// so a rank reads only the samples it trains on, runs are reproducible, and a resumed run sees
// exactly the samples an uninterrupted run would. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::runtime {

// Where the tokens come from.
enum class DataFormat {
  kSynthetic,  // generated: arithmetic progressions modulo the vocabulary (learnable, no file)
  kUint16,     // a file of little-endian uint16 token ids (nanoGPT's train.bin)
  kUint32,     // a file of little-endian uint32 token ids
  kText,       // any file read as bytes: token id = byte value (needs vocab >= 256)
};

const char* to_string(DataFormat f);
// "auto" picks from the file name: *.bin / *.u16 -> uint16, *.u32 -> uint32, anything else -> text.
Result<DataFormat> data_format_from_string(const std::string& s, const std::string& path);

class TokenSource {
 public:
  virtual ~TokenSource() = default;
  // Writes `len` tokens of sample `index` of optimizer step `step` into out. Throws InputError
  // (kIo or kBadInput) naming the file and offset if the data cannot be read or a token id is
  // >= the vocabulary.
  virtual void sample(std::int64_t step, std::int64_t index, std::int64_t len, std::int64_t* out) const = 0;
  virtual std::string describe() const = 0;
};

// A synthetic source: sample = (start + stride * i) mod vocab with start and stride drawn from a
// counter-based generator keyed by (seed, step, index).
std::unique_ptr<TokenSource> synthetic_source(std::int64_t vocab, std::uint64_t seed);

// A file source. Samples start at pseudo-random offsets keyed by (seed, step, index); the file is
// memory-mapped, so each rank touches only the pages of its own samples. Errors (kIo) if the file
// cannot be opened or holds fewer than len + 1 tokens; (kBadInput) if the vocabulary is too small
// for the format.
Result<std::unique_ptr<TokenSource>> file_source(const std::string& path, DataFormat f, std::int64_t vocab,
                                                 std::int64_t sample_len, std::uint64_t seed);

// SplitMix64 step: the counter-based mixer used for init seeds and sample positions.
std::uint64_t mix64(std::uint64_t x);

}  // namespace weft::runtime
