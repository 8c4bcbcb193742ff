// Reading and writing a profile file, shared by the hardware and model profiles: parse the JSON
// file and convert it with its reader (errors name the file and the field); validate before
// writing, so that no invalid profile is ever written (the write itself is atomic and durable).
#pragma once

#include <string>

#include "weft/core/error.h"
#include "weft/core/json.h"

namespace weft {

template <class Profile, class FromJson>
Result<Profile> read_profile_file(const std::string& path, FromJson from_json) {
  auto j = catch_errors([&] { return read_json_file(path); });
  if (!j.ok()) return j.error();
  return from_json(j.value(), path);
}

// The frame of a profile reader: runs `parse` (returning the profile or an Error; JsonObj
// accessors throw a JsonError naming the field), validate()s the profile, and names `path` in any
// error.
template <class Profile, class Parse>
Result<Profile> parse_profile(const std::string& path, Parse parse) {
  auto r = catch_errors([&]() -> Result<Profile> {
    Result<Profile> p = parse();
    if (!p.ok()) return p.error();
    Status st = validate(p.value());
    if (!st.ok()) return st.error();
    return p;
  });
  if (!r.ok()) return r.error().with_context(path);
  return r;
}

template <class Profile>
Status write_validated_profile(const std::string& path, const Profile& p) {
  Status st = validate(p);
  if (!st.ok()) return st.error().with_context(path);
  auto r = catch_errors([&]() -> Result<bool> {
    write_json_file(path, to_json(p));
    return true;
  });
  if (!r.ok()) return r.error();
  return {};
}

}  // namespace weft
