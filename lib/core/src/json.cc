#include "weft/core/json.h"

#include <fstream>
#include <sstream>

#include "weft/core/durable_file.h"
#include "weft/core/error.h"

namespace weft {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path + ": cannot open file for reading", ErrorKind::kIo);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_file(const std::string& path, const std::string& text) {
  Status s = write_file_durably(path, [&](ByteSink& out) { out.write(text); });
  if (!s.ok()) throw InputError(s.error().message, ErrorKind::kIo);
}

Json read_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    throw InputError(path + ": malformed JSON: " + e.what());
  }
}

void write_json_file(const std::string& path, const Json& j) { write_text_file(path, j.dump(2) + "\n"); }

namespace {
std::string type_name(const Json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}
std::string show(const Json& j) {
  std::string s = j.dump();
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}
}  // namespace

JsonObj::JsonObj(const Json& j, std::string path) : j_(j), path_(std::move(path)) {
  if (!j_.is_object()) throw InputError(path_ + ": expected an object, got " + type_name(j_));
}

bool JsonObj::has(std::string_view key) const { return j_.contains(std::string(key)); }

std::string JsonObj::field(std::string_view key) const {
  return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
}

void JsonObj::fail(std::string_view key, const std::string& msg) const {
  throw InputError(field(key) + ": " + msg);
}

const Json& JsonObj::at(std::string_view key) const {
  auto it = j_.find(std::string(key));
  if (it == j_.end()) fail(key, "missing required field");
  return *it;
}

std::string JsonObj::str(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_string()) fail(key, "expected a string, got " + type_name(v) + " " + show(v));
  return v.get<std::string>();
}

long long JsonObj::integer(std::string_view key) const {
  const Json& v = at(key);
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<long long>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (d == static_cast<double>(static_cast<long long>(d))) return static_cast<long long>(d);
  }
  fail(key, "expected an integer, got " + type_name(v) + " " + show(v));
}

double JsonObj::number(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_number()) fail(key, "expected a number, got " + type_name(v) + " " + show(v));
  return v.get<double>();
}

bool JsonObj::boolean(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_boolean()) fail(key, "expected true or false, got " + type_name(v) + " " + show(v));
  return v.get<bool>();
}

JsonObj JsonObj::obj(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_object()) fail(key, "expected an object, got " + type_name(v));
  return JsonObj(v, field(key));
}

std::vector<JsonObj> JsonObj::array_of_obj(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + type_name(v));
  std::vector<JsonObj> out;
  for (size_t i = 0; i < v.size(); ++i) out.emplace_back(v[i], field(key) + "[" + std::to_string(i) + "]");
  return out;
}

std::vector<long long> JsonObj::array_of_int(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + type_name(v));
  std::vector<long long> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() && !v[i].is_number_unsigned())
      fail(std::string(key) + "[" + std::to_string(i) + "]", "expected an integer, got " + show(v[i]));
    out.push_back(v[i].get<long long>());
  }
  return out;
}

std::vector<double> JsonObj::array_of_number(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + type_name(v));
  std::vector<double> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) fail(std::string(key) + "[" + std::to_string(i) + "]", "expected a number, got " + show(v[i]));
    out.push_back(v[i].get<double>());
  }
  return out;
}

std::vector<std::string> JsonObj::array_of_str(std::string_view key) const {
  const Json& v = at(key);
  if (!v.is_array()) fail(key, "expected an array, got " + type_name(v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) fail(std::string(key) + "[" + std::to_string(i) + "]", "expected a string, got " + show(v[i]));
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::string JsonObj::str_or(std::string_view key, const std::string& d) const { return has(key) ? str(key) : d; }
long long JsonObj::integer_or(std::string_view key, long long d) const { return has(key) ? integer(key) : d; }
double JsonObj::number_or(std::string_view key, double d) const { return has(key) ? number(key) : d; }
bool JsonObj::boolean_or(std::string_view key, bool d) const { return has(key) ? boolean(key) : d; }

void JsonObj::reject_unknown(std::initializer_list<std::string_view> known) const {
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    bool ok = false;
    for (auto k : known) ok = ok || it.key() == k;
    if (!ok) {
      std::string list;
      for (auto k : known) list += (list.empty() ? "" : ", ") + std::string(k);
      throw InputError(field(it.key()) + ": unknown field (known fields: " + list + ")");
    }
  }
}

std::string json_hash(const Json& j) {
  const std::string s = j.dump();
  unsigned long long h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", h);
  return buf;
}

}  // namespace weft
