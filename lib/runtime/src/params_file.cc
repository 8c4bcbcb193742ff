#include "weft/runtime/params_file.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "weft/core/durable_file.h"
#include "weft/core/json.h"

namespace weft::runtime {

Status write_params_file(const std::string& path, const ParamsFile& f) {
  Json header;
  header["format"] = "weft-params";
  header["version"] = 1;
  header["step"] = f.step;
  Json list = Json::array();
  for (const auto& p : f.params) list.push_back(Json{{"name", p.name}, {"shape", p.shape}});
  header["params"] = std::move(list);
  const std::string line = header.dump() + "\n";
  return write_file_durably(path, [&](ByteSink& out) {
    out.write(line);
    for (const auto& p : f.params) out.write(p.data.data(), p.data.size() * sizeof(float));
  });
}

Result<ParamsFile> read_params_file(const std::string& path) {
  return catch_errors([&]() -> Result<ParamsFile> {
    std::ifstream in(path, std::ios::binary);
    if (!in) return Error{ErrorKind::kIo, path + ": cannot open"};
    std::string line;
    if (!std::getline(in, line)) return Error{ErrorKind::kIo, path + ": empty file"};
    const Json h = Json::parse(line);
    JsonObj o(h, path);
    if (o.str("format") != "weft-params") o.fail("format", "not a weft-params file");
    if (o.integer("version") != 1) o.fail("version", "unsupported version " + std::to_string(o.integer("version")));
    ParamsFile f;
    f.step = static_cast<int>(o.integer_or("step", 0));
    for (const auto& e : o.array_of_obj("params")) {
      NamedParam p;
      p.name = e.str("name");
      std::int64_t n = 1;
      for (long long d : e.array_of_int("shape")) {
        p.shape.push_back(d);
        n *= d;
      }
      p.data.resize(static_cast<size_t>(n));
      in.read(reinterpret_cast<char*>(p.data.data()), static_cast<std::streamsize>(n * 4));
      if (!in) return Error{ErrorKind::kIo, path + ": truncated data in parameter " + p.name};
      f.params.push_back(std::move(p));
    }
    return f;
  });
}

Result<ParamsDiff> compare_params(const ParamsFile& a, const ParamsFile& b) {
  if (a.params.size() != b.params.size())
    return Error{ErrorKind::kBadInput, "parameter counts differ: " + std::to_string(a.params.size()) + " vs " +
                                           std::to_string(b.params.size())};
  ParamsDiff d;
  for (size_t i = 0; i < a.params.size(); ++i) {
    const auto& x = a.params[i];
    const auto& y = b.params[i];
    if (x.name != y.name || x.shape != y.shape)
      return Error{ErrorKind::kBadInput, "parameter " + std::to_string(i) + " differs: " + x.name + " vs " + y.name};
    double diff2 = 0, ref2 = 0;
    for (size_t k = 0; k < x.data.size(); ++k) {
      const double e = std::fabs(static_cast<double>(x.data[k]) - y.data[k]);
      if (e > d.max_abs) {
        d.max_abs = e;
        d.worst = x.name;
      }
      if (std::isnan(e)) {
        d.max_abs = e;
        d.worst = x.name;
      }
      diff2 += e * e;
      ref2 += static_cast<double>(y.data[k]) * y.data[k];
    }
    if (ref2 > 0) d.max_rel_norm = std::max(d.max_rel_norm, std::sqrt(diff2 / ref2));
  }
  return d;
}

}  // namespace weft::runtime
