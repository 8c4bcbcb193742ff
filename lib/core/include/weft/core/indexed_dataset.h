// Megatron-LM's indexed dataset: the `.idx` + `.bin` pair its preprocessing (tools/preprocess_data.py)
// writes and its GPT datasets read (megatron/core/datasets/indexed_dataset.py, index version 1).
// weft reads the index and checks it against the data file; the tokens themselves are read by the
// runtime's token sources (weft/runtime/data.h) and the documents' lengths by variable-length
// planning (weft/varlen/lengths.h). Torch-free.
//
// The index, little-endian, packed (docs/runtime.md "Data"):
//   9 bytes   "MMIDIDX\0\0"
//   uint64    version (1)
//   uint8     dtype code of the .bin's elements: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64,
//             6 float64, 7 float32, 8 uint16
//   uint64    S, the number of sequences
//   uint64    D, the number of document indices (documents + 1)
//   int32[S]  tokens per sequence
//   int64[S]  byte offset of each sequence in the .bin
//   int64[D]  the sequence each document starts at, then S: document d is sequences
//             [index[d], index[d + 1])
//   int8[S]   only in a multimodal dataset: each sequence's mode
// A document is one sequence unless the text was split into sentences (--split-sentences).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft {

// Documents as runs of the .bin's tokens: each one's first token and its length.
struct TokenSpans {
  std::vector<std::int64_t> start, length;
};

struct IndexedDataset {
  std::string prefix;                     // PREFIX of PREFIX.idx and PREFIX.bin
  int dtype_code = 0;                     // the codes above; integer ones only (floats are refused)
  int item_bytes = 0;                     // bytes per token of the .bin
  bool is_signed = false;                 // int8, int16, int32, int64
  std::vector<std::int32_t> sequence_lengths;
  std::vector<std::int64_t> sequence_pointers;   // bytes
  std::vector<std::int64_t> document_indices;    // D = documents + 1 entries
  std::int64_t bin_bytes = 0;             // size of PREFIX.bin

  std::int64_t tokens() const { return bin_bytes / item_bytes; }
  std::int64_t documents() const { return static_cast<std::int64_t>(document_indices.size()) - 1; }
  // The documents that hold tokens (an index may list empty ones), in order.
  TokenSpans document_spans() const;
  std::string dtype_name() const;
};

// "PREFIX", "PREFIX.bin" or "PREFIX.idx" -> PREFIX.
std::string indexed_dataset_prefix(const std::string& path);
// Whether PREFIX.idx and PREFIX.bin both exist for this path (any of the three spellings above).
bool is_indexed_dataset(const std::string& path);

// Reads and checks PREFIX.idx against PREFIX.bin. Errors name the file, the field and the numbers:
// kIo for a missing or unreadable file; kBadInput for another magic or version, an unknown or
// floating-point dtype, an index whose size is not what its counts say, a multimodal index, a
// negative length, a sequence that points past the .bin or is not stored right after the one
// before (Megatron's preprocessing and merge write them back to back from byte 0, which weft
// relies on: the .bin is then the documents' tokens in order), a .bin of other size than the
// sequences, or document indices that do not run from 0 to S without going back.
Result<IndexedDataset> read_indexed_dataset(const std::string& path);

}  // namespace weft
