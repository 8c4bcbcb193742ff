#include "weft/runtime/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "weft/core/durable_file.h"
#include "weft/core/json.h"

namespace weft::runtime {

namespace {

// Element sizes of the safetensors dtypes (the format's Dtype enum).
int element_bytes(const std::string& d) {
  static const std::map<std::string, int> k = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8}};
  auto it = k.find(d);
  return it == k.end() ? 0 : it->second;
}

// The safetensors library refuses headers over 100 MB; so does weft.
constexpr std::uint64_t kMaxHeader = 100'000'000;

}  // namespace

std::int64_t SafetensorsEntry::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

float bf16_to_float(std::uint16_t v) {
  const std::uint32_t x = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return static_cast<std::uint16_t>((x >> 16) | 0x40);  // stays a NaN
  x += 0x7fff + ((x >> 16) & 1);  // round to nearest, ties to even
  return static_cast<std::uint16_t>(x >> 16);
}

float f16_to_float(std::uint16_t v) {
  const std::uint32_t sign = static_cast<std::uint32_t>(v & 0x8000) << 16;
  const std::uint32_t exp = (v >> 10) & 0x1f, mant = v & 0x3ff;
  if (exp == 0) {
    const float m = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
    return sign ? -m : m;
  }
  const std::uint32_t x = exp == 31 ? sign | 0x7f800000u | (mant << 13) : sign | ((exp + 112) << 23) | (mant << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

std::uint16_t float_to_f16(float f) {
  std::uint32_t x;
  std::memcpy(&x, &f, 4);
  const std::uint32_t sign = (x >> 16) & 0x8000;
  const std::uint32_t e32 = (x >> 23) & 0xff;
  std::uint32_t mant = x & 0x7fffff;
  if (e32 == 0xff) return static_cast<std::uint16_t>(sign | 0x7c00 | (mant ? 0x200 : 0));  // inf, nan
  const int exp = static_cast<int>(e32) - 127 + 15;
  if (exp >= 31) return static_cast<std::uint16_t>(sign | 0x7c00);  // overflow: inf
  if (exp <= 0) {                                                    // subnormal or zero
    if (exp < -10) return static_cast<std::uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    std::uint32_t h = mant >> shift;
    const std::uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (h & 1))) ++h;
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = sign | (static_cast<std::uint32_t>(exp) << 10) | (mant >> 13);
  const std::uint32_t rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;  // a carry rounds into the exponent
  return static_cast<std::uint16_t>(h);
}

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  auto bad = [&](const std::string& m) { return Error{ErrorKind::kBadInput, path + ": " + m}; };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{ErrorKind::kIo, path + ": cannot open: " + std::strerror(errno)};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return Error{ErrorKind::kIo, path + ": cannot stat: " + std::strerror(e)};
  }
  const std::uint64_t bytes = static_cast<std::uint64_t>(st.st_size);
  if (bytes < 8) {
    ::close(fd);
    return Error{ErrorKind::kIo, path + ": " + std::to_string(bytes) + " bytes, shorter than the 8-byte header length"};
  }
  void* base = mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (base == MAP_FAILED) return Error{ErrorKind::kIo, path + ": cannot map: " + std::strerror(e)};
  f->map_ = base;
  f->map_bytes_ = bytes;
  const auto* p = static_cast<const unsigned char*>(base);
  std::uint64_t n = 0;
  std::memcpy(&n, p, 8);
  if (n > kMaxHeader) return bad("header length " + std::to_string(n) + " bytes (over the format's 100 MB)");
  if (8 + n > bytes)
    return Error{ErrorKind::kIo, path + ": the header says " + std::to_string(n) + " bytes but the file has " +
                                     std::to_string(bytes - 8) + " after its length (truncated)"};
  Json h;
  try {
    h = Json::parse(reinterpret_cast<const char*>(p + 8), reinterpret_cast<const char*>(p + 8 + n));
  } catch (const std::exception& ex) {
    return bad(std::string("the header is not JSON: ") + ex.what());
  }
  if (!h.is_object()) return bad("the header is not a JSON object");
  const std::uint64_t data_bytes = bytes - 8 - n;
  f->data_ = p + 8 + n;
  for (auto it = h.begin(); it != h.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.value().is_string()) f->metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    const std::string where = "tensor " + name;
    if (!v.is_object() || !v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
      return bad(where + ": needs dtype, shape and data_offsets");
    SafetensorsEntry t;
    t.name = name;
    if (!v["dtype"].is_string()) return bad(where + ": dtype is not a string");
    t.dtype = v["dtype"].get<std::string>();
    const int eb = element_bytes(t.dtype);
    if (eb == 0) return bad(where + ": unknown dtype \"" + t.dtype + "\"");
    if (!v["shape"].is_array()) return bad(where + ": shape is not a list");
    // The element count, kept from overflowing (a damaged shape must not wrap around to a plausible
    // size that its offsets then match); the checks below say what is wrong with a plausible one.
    const std::uint64_t most = static_cast<std::uint64_t>(INT64_MAX) / 8;
    std::uint64_t count = 1;
    bool zero = false;
    for (const Json& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return bad(where + ": shape " + v["shape"].dump());
      const auto n = static_cast<std::uint64_t>(d.get<std::int64_t>());
      t.shape.push_back(static_cast<std::int64_t>(n));
      zero = zero || n == 0;
      if (!zero && n > most / count)
        return bad(where + ": shape " + v["shape"].dump() + " has more elements than a file can hold");
      if (!zero) count *= n;
    }
    const Json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_integer() || !off[1].is_number_integer())
      return bad(where + ": data_offsets " + off.dump() + " is not [begin, end]");
    t.begin = off[0].get<std::int64_t>();
    t.end = off[1].get<std::int64_t>();
    if (t.begin < 0 || t.end < t.begin) return bad(where + ": data_offsets " + off.dump());
    if (t.end - t.begin != t.numel() * eb)
      return bad(where + ": data_offsets " + off.dump() + " span " + std::to_string(t.end - t.begin) + " bytes, but " +
                 t.dtype + " " + v["shape"].dump() + " needs " + std::to_string(t.numel() * eb));
    f->entries_.push_back(std::move(t));
  }
  std::sort(f->entries_.begin(), f->entries_.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) { return a.begin < b.begin || (a.begin == b.begin && a.end < b.end); });
  std::int64_t at = 0;
  for (const SafetensorsEntry& t : f->entries_) {
    if (t.begin != at)
      return bad("tensor " + t.name + " starts at byte " + std::to_string(t.begin) + " of the data, not " +
                 std::to_string(at) + (t.begin < at ? " (tensors overlap)" : " (a gap before it)"));
    at = t.end;
  }
  if (static_cast<std::uint64_t>(at) > data_bytes)
    return Error{ErrorKind::kIo, path + ": its tensors need " + std::to_string(at) + " bytes of data but the file has " +
                                     std::to_string(data_bytes) + " (truncated)"};
  if (static_cast<std::uint64_t>(at) < data_bytes)
    return bad(std::to_string(data_bytes - static_cast<std::uint64_t>(at)) + " bytes after the last tensor");
  for (std::size_t i = 0; i < f->entries_.size(); ++i) f->by_name_[f->entries_[i].name] = i;
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, map_bytes_);
}

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

Result<std::vector<float>> SafetensorsFile::read_float(const std::string& name) const {
  const SafetensorsEntry* t = find(name);
  if (!t) return Error{ErrorKind::kBadInput, path_ + ": no tensor " + name};
  const unsigned char* p = data_ + t->begin;
  const std::int64_t n = t->numel();
  std::vector<float> out(static_cast<std::size_t>(n));
  if (t->dtype == "F32") {
    std::memcpy(out.data(), p, static_cast<std::size_t>(n) * 4);
  } else if (t->dtype == "BF16" || t->dtype == "F16") {
    const bool bf = t->dtype == "BF16";
    for (std::int64_t i = 0; i < n; ++i) {
      std::uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[static_cast<std::size_t>(i)] = bf ? bf16_to_float(v) : f16_to_float(v);
    }
  } else if (t->dtype == "F64") {
    for (std::int64_t i = 0; i < n; ++i) {
      double v;
      std::memcpy(&v, p + 8 * i, 8);
      out[static_cast<std::size_t>(i)] = static_cast<float>(v);
    }
  } else {
    return Error{ErrorKind::kBadInput, path_ + ": tensor " + name + " is " + t->dtype + "; weights are F32, BF16, F16 or F64"};
  }
  for (std::int64_t i = 0; i < n; ++i)
    if (!std::isfinite(out[static_cast<std::size_t>(i)]))
      return Error{ErrorKind::kBadInput, path_ + ": tensor " + name + " holds a value that is not finite at element " +
                                             std::to_string(i) + " (a corrupt file?)"};
  return out;
}

const char* to_string(SaveDType t) {
  switch (t) {
    case SaveDType::kF32: return "F32";
    case SaveDType::kBF16: return "BF16";
    case SaveDType::kF16: return "F16";
  }
  return "?";
}

Result<SaveDType> save_dtype_from_string(const std::string& s) {
  if (s == "fp32" || s == "F32") return SaveDType::kF32;
  if (s == "bf16" || s == "BF16") return SaveDType::kBF16;
  if (s == "fp16" || s == "F16") return SaveDType::kF16;
  return Error{ErrorKind::kBadInput, "unknown dtype \"" + s + "\" (expected fp32, bf16 or fp16)"};
}

std::int64_t dtype_bytes(SaveDType t) { return t == SaveDType::kF32 ? 4 : 2; }

Status write_safetensors(const std::string& path, const std::vector<TensorOut>& tensors, SaveDType dtype,
                         const std::map<std::string, std::string>& metadata) {
  Json h = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  std::int64_t at = 0;
  const std::int64_t eb = dtype_bytes(dtype);
  for (const TensorOut& t : tensors) {
    std::int64_t n = 1;
    for (std::int64_t d : t.shape) n *= d;
    WEFT_ASSERT(t.data && static_cast<std::int64_t>(t.data->size()) == n, "tensor " + t.name + ": data of another size");
    h[t.name] = {{"dtype", to_string(dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + n * eb}}};
    at += n * eb;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  return write_file_durably(path, [&](ByteSink& out) {
    const std::uint64_t n = header.size();
    out.write(&n, 8);
    out.write(header);
    std::vector<std::uint16_t> buf;
    for (const TensorOut& t : tensors) {
      if (dtype == SaveDType::kF32) {
        out.write(t.data->data(), t.data->size() * 4);
        continue;
      }
      buf.resize(t.data->size());
      for (std::size_t i = 0; i < buf.size(); ++i)
        buf[i] = dtype == SaveDType::kBF16 ? float_to_bf16((*t.data)[i]) : float_to_f16((*t.data)[i]);
      out.write(buf.data(), buf.size() * 2);
    }
  });
}

}  // namespace weft::runtime
