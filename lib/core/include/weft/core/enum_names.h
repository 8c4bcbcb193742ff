// Enum <-> name tables: one table per enum gives both directions and the error message, so the
// names of a value are written once. Usage:
//   constexpr EnumName<Schedule> kScheduleNames[] = {{Schedule::kGpipe, "gpipe"}, ...};
//   to_string(s)            -> enum_name(kScheduleNames, s)
//   schedule_from_string(x) -> enum_from_name(kScheduleNames, x, "schedule")
// An unknown name is kBadInput: `schedule: unknown value "x" (expected gpipe, 1f1b or interleaved)`.
// A parser with a message of its own looks the name up with enum_value() instead.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "weft/core/error.h"

namespace weft {

template <class E>
struct EnumName {
  E value;
  const char* name;
};

// The name of v; "?" for a value missing from the table.
template <class E, std::size_t N>
const char* enum_name(const EnumName<E> (&table)[N], E v) {
  for (const auto& e : table)
    if (e.value == v) return e.name;
  return "?";
}

// "a, b or c": the table's names, for messages.
template <class E, std::size_t N>
std::string enum_names_list(const EnumName<E> (&table)[N]) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) out += (i == 0 ? "" : i + 1 == N ? " or " : ", ") + std::string(table[i].name);
  return out;
}

// The table's names joined by `separator`: enum_names_joined(kScheduleNames, ", ") is
// "gpipe, 1f1b, interleaved".
template <class E, std::size_t N>
std::string enum_names_joined(const EnumName<E> (&table)[N], const std::string& separator) {
  std::string out;
  for (std::size_t i = 0; i < N; ++i) out += (i == 0 ? "" : separator) + std::string(table[i].name);
  return out;
}

// The value named `s`, or nullopt when the table has no such name.
template <class E, std::size_t N>
std::optional<E> enum_value(const EnumName<E> (&table)[N], const std::string& s) {
  for (const auto& e : table)
    if (s == e.name) return e.value;
  return std::nullopt;
}

// The value named `s`; an error naming `field`, the value and the choices otherwise.
template <class E, std::size_t N>
Result<E> enum_from_name(const EnumName<E> (&table)[N], const std::string& s, const std::string& field) {
  if (const std::optional<E> v = enum_value(table, s)) return *v;
  return Error{ErrorKind::kBadInput,
               field + ": unknown value \"" + s + "\" (expected " + enum_names_list(table) + ")"};
}

}  // namespace weft
