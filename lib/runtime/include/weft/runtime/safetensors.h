// safetensors files (Hugging Face's format for weights): an 8-byte little-endian header length N,
// N bytes of JSON, then the tensors' bytes. The header maps each tensor name to
// {"dtype": "F32" | "BF16" | ..., "shape": [...], "data_offsets": [begin, end]} (offsets into the
// bytes after the header) and may hold "__metadata__", a map of strings. Torch-free: the runtime
// converts what it reads to float32 and back (weft/runtime/hf_checkpoint.h maps the names).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::runtime {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;                 // as in the header: "F32", "BF16", "F16", "F64", "I64", ...
  std::vector<std::int64_t> shape;
  std::int64_t begin = 0, end = 0;   // bytes, relative to the data after the header
  std::int64_t numel() const;
};

// An opened file: the header parsed and checked, the data memory-mapped (each rank touches only
// the pages of the tensors it reads).
class SafetensorsFile {
 public:
  // Errors name the file and the numbers: kIo when it cannot be opened or is shorter than its
  // header says; kBadInput for a header that is not a JSON object, an entry without dtype, shape
  // or data_offsets, an unknown dtype, offsets whose span is not the shape's bytes, tensors that
  // overlap or leave gaps, and data that ends before the last tensor (a truncated file).
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }  // by offset
  const SafetensorsEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's values as float32 (F32, F16, BF16 and F64 converted); kBadInput for an integer or
  // other dtype, and for a value that is not finite (named with its index: a corrupt file).
  Result<std::vector<float>> read_float(const std::string& name) const;

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::size_t> by_name_;
  std::map<std::string, std::string> metadata_;
  const unsigned char* data_ = nullptr;  // the bytes after the header
  void* map_ = nullptr;
  std::size_t map_bytes_ = 0;
};

// The floating-point types weft writes.
enum class SaveDType { kF32, kBF16, kF16 };
const char* to_string(SaveDType t);  // "F32", "BF16", "F16"
Result<SaveDType> save_dtype_from_string(const std::string& s);  // fp32, bf16, fp16 (or F32, BF16, F16)
std::int64_t dtype_bytes(SaveDType t);

struct TensorOut {
  std::string name;
  std::vector<std::int64_t> shape;
  const std::vector<float>* data = nullptr;  // product(shape) values, row-major
};

// Writes the tensors in the order given, converted to `dtype` (round to nearest even), durably (a
// temporary file renamed into place: weft/core/durable_file.h); the header padded with spaces to a
// multiple of 8 bytes, as the safetensors library writes it. kIo naming the path on failure.
Status write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors, SaveDType dtype,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

// The conversions, exposed for tests.
float bf16_to_float(std::uint16_t v);
float f16_to_float(std::uint16_t v);
std::uint16_t float_to_bf16(float f);
std::uint16_t float_to_f16(float f);

}  // namespace weft::runtime
