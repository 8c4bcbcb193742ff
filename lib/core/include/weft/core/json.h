// Helpers for reading JSON with errors that name the field: "model.groups[1].hidden: expected an
// integer, got \"abc\"". All readers throw InputError; callers wrap them with catch_errors().
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace weft {

using Json = nlohmann::ordered_json;

// Reads and parses a JSON file; throws InputError naming the file (kIo if it cannot be read).
Json read_json_file(const std::string& path);
// Writes JSON (indented by 2) atomically and durably (weft/core/durable_file.h); throws InputError
// (kIo) naming the path.
void write_json_file(const std::string& path, const Json& j);
// Reads a whole text file; throws InputError (kIo) naming it.
std::string read_text_file(const std::string& path);
// Writes a text file atomically and durably (temporary file, fsync, rename, fsync of the
// directory; weft/core/durable_file.h); throws InputError (kIo) naming the path.
void write_text_file(const std::string& path, const std::string& text);

// A view of one JSON object with its path, for field-naming errors.
class JsonObj {
 public:
  JsonObj(const Json& j, std::string path);
  const std::string& path() const { return path_; }
  const Json& json() const { return j_; }
  bool has(std::string_view key) const;

  // Required fields: throw if missing or of the wrong type.
  std::string str(std::string_view key) const;
  long long integer(std::string_view key) const;
  double number(std::string_view key) const;
  bool boolean(std::string_view key) const;
  JsonObj obj(std::string_view key) const;
  std::vector<JsonObj> array_of_obj(std::string_view key) const;
  std::vector<long long> array_of_int(std::string_view key) const;
  std::vector<double> array_of_number(std::string_view key) const;
  std::vector<std::string> array_of_str(std::string_view key) const;

  // Optional fields with a default.
  std::string str_or(std::string_view key, const std::string& dflt) const;
  long long integer_or(std::string_view key, long long dflt) const;
  double number_or(std::string_view key, double dflt) const;
  bool boolean_or(std::string_view key, bool dflt) const;

  // Field path for messages: "<path>.<key>".
  std::string field(std::string_view key) const;
  // Throws "<path>.<key>: <msg>".
  [[noreturn]] void fail(std::string_view key, const std::string& msg) const;
  // Rejects keys not in `known` (typos in hand-written files are errors, not silently ignored).
  void reject_unknown(std::initializer_list<std::string_view> known) const;

 private:
  const Json& at(std::string_view key) const;
  const Json& j_;
  std::string path_;
};

// Short hex digest (FNV-1a 64) of a JSON value's canonical dump, for plan provenance hashes.
std::string json_hash(const Json& j);

}  // namespace weft
