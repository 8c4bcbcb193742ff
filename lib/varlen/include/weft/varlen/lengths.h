// Document lengths for variable-length planning (docs/varlen.md): read from a lengths file (one
// length per line) or from a token file split at an end-of-document id, and cut into the global
// batches a run would draw.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::varlen {

// One positive integer per line; blank lines and lines starting with '#' are skipped. Errors name
// the file, the line and what is on it (zero, negative, not an integer), and an empty file.
Result<std::vector<std::int64_t>> read_lengths(const std::string& path);

// Document lengths of a token file: ids as uint16 (`format` "uint16", or "auto" with a .bin or .u16
// name) or uint32 ("uint32", or "auto" with a .u32 name). A document ends with each `eos` id, which
// it counts; tokens after the last `eos` are one more document.
Result<std::vector<std::int64_t>> document_lengths(const std::string& path, std::int64_t eos,
                                                   const std::string& format = "auto");

// Document lengths of a Megatron-LM indexed dataset (PREFIX, PREFIX.idx or PREFIX.bin): from its
// index (weft/core/indexed_dataset.h), without reading the tokens; empty documents left out.
Result<std::vector<std::int64_t>> indexed_document_lengths(const std::string& path);

// The documents of `--lengths FILE` or of `--data TOKENS --eos ID` (exactly one of the two paths
// given; eos < 0: not given): read_lengths, document_lengths or, for a Megatron dataset (format
// "megatron", or "auto" where PREFIX.idx and PREFIX.bin exist; no --eos then),
// indexed_document_lengths; errors say which flags.
Result<std::vector<std::int64_t>> load_documents(const std::string& lengths_path, const std::string& data_path,
                                                 std::int64_t eos, const std::string& format = "auto");

// The global batches a run draws: `steps` batches of `global_batch` documents, taken in order from
// the `first_step`-th batch on (after shuffling the documents with `seed` when it is not 0), leaving
// out documents longer than `max_seq` (0: none), which are counted.
struct Batches {
  std::vector<std::vector<std::int64_t>> steps;
  std::int64_t dropped = 0;  // documents over max_seq passed over while drawing the batches
  std::int64_t longest = 0;  // the longest document drawn
};
Result<Batches> draw_batches(const std::vector<std::int64_t>& lengths, int global_batch, int steps, int first_step,
                             std::int64_t max_seq, std::uint64_t seed);

}  // namespace weft::varlen
