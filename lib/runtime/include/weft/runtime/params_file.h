// Consolidated parameter files ("weft-params" v1): every parameter of a model at full size, in
// model order, as float32. Written by `weft train --save-params`, read by tests and tools.
//
// Layout: one line of JSON, a newline, then the raw little-endian float32 data of every parameter
// back to back in the order listed:
//   {"format":"weft-params","version":1,"step":N,
//    "params":[{"name":"layers.0.attn.wq","shape":[32,32]}, ...]}\n<data>
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "weft/core/error.h"

namespace weft::runtime {

struct NamedParam {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;  // row-major, product(shape) values
};

struct ParamsFile {
  int step = 0;
  std::vector<NamedParam> params;
};

// Writes atomically and durably (temporary file, fsync, rename, fsync of the directory:
// weft/core/durable_file.h). Errors are kIo naming the path.
Status write_params_file(const std::string& path, const ParamsFile& f);
Result<ParamsFile> read_params_file(const std::string& path);

struct ParamsDiff {
  double max_abs = 0;        // largest |a - b| over all elements
  std::string worst;         // the parameter holding it
  double max_rel_norm = 0;   // largest ||a - b|| / ||b|| over parameters
};
// Compares two files parameter by parameter; an error if names or shapes differ.
Result<ParamsDiff> compare_params(const ParamsFile& a, const ParamsFile& b);

}  // namespace weft::runtime
