// Writes a Megatron-LM indexed dataset (PREFIX.idx + PREFIX.bin) byte by byte from the layout its
// megatron/core/datasets/indexed_dataset.py documents (header "MMIDIDX\0\0", version 1, dtype code,
// sequence and document counts, int32 lengths, int64 byte pointers, int64 document indices), so the
// tests check weft's reader against the format rather than against a writer of weft's own.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace weft::testing {

struct MegatronDataset {
  int dtype_code = 8;  // 8 uint16, 4 int32, 1 uint8, ...
  // Documents, each a list of sequences (sentences), each a list of token ids.
  std::vector<std::vector<std::vector<std::int64_t>>> documents;
};

inline int megatron_item_bytes(int code) {
  switch (code) {
    case 1: case 2: return 1;
    case 3: case 8: return 2;
    case 4: case 7: return 4;
    default: return 8;
  }
}

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

// The .idx bytes and the .bin bytes.
inline std::pair<std::string, std::string> megatron_bytes(const MegatronDataset& d) {
  const int w = megatron_item_bytes(d.dtype_code);
  std::vector<std::int32_t> lengths;
  std::vector<std::int64_t> pointers, doc_index{0};
  std::string bin;
  for (const auto& doc : d.documents) {
    for (const auto& seq : doc) {
      pointers.push_back(static_cast<std::int64_t>(bin.size()));
      lengths.push_back(static_cast<std::int32_t>(seq.size()));
      for (std::int64_t t : seq) {
        const std::uint64_t v = static_cast<std::uint64_t>(t);
        char b[8];
        std::memcpy(b, &v, 8);  // little-endian: the low bytes first
        bin.append(b, w);
      }
    }
    doc_index.push_back(static_cast<std::int64_t>(lengths.size()));
  }
  std::string idx("MMIDIDX\0\0", 9);
  put<std::uint64_t>(idx, 1);
  put<std::uint8_t>(idx, static_cast<std::uint8_t>(d.dtype_code));
  put<std::uint64_t>(idx, lengths.size());
  put<std::uint64_t>(idx, doc_index.size());
  for (auto v : lengths) put(idx, v);
  for (auto v : pointers) put(idx, v);
  for (auto v : doc_index) put(idx, v);
  return {idx, bin};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline void write_megatron_dataset(const std::string& prefix, const MegatronDataset& d) {
  const auto [idx, bin] = megatron_bytes(d);
  write_bytes(prefix + ".idx", idx);
  write_bytes(prefix + ".bin", bin);
}

}  // namespace weft::testing
