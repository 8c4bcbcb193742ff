// Number formatting for messages, tables and reports: the one owner of the small formatters that
// error messages ("tp=3 does not divide 32 heads") and tables are built with. Pure; thread-safe.
#pragma once

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <sstream>
#include <string>

namespace weft {

// An integer in decimal: S(32) == "32".
inline std::string S(long long x) { return std::to_string(x); }

// A double in the shortest usual form (ostream's default, 6 significant digits): num(0.5) == "0.5",
// num(1e-07) == "1e-07".
inline std::string num(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// A double with `digits` digits after the point: fixed(2.345, 1) == "2.3".
inline std::string fixed(double x, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// A double through one printf conversion: printf_str("%.1f ms", 2.25) == "2.2 ms".
inline std::string printf_str(const char* format, double x) {
  char buf[128];
  std::snprintf(buf, sizeof buf, format, x);
  return buf;
}

// One printf conversion of any arguments into a string: sprintf_str("%-6s %3d", "tp", 4).
[[gnu::format(printf, 1, 2)]] inline std::string sprintf_str(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string out(n > 0 ? n : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, format, again);
  va_end(again);
  return out;
}

// Rounded to an integer with thousands separators: grouped(1234567) == "1,234,567".
inline std::string grouped(double x) {
  const std::string d = std::to_string(static_cast<long long>(std::llround(x)));
  std::string out;
  const int n = static_cast<int>(d.size());
  for (int i = 0; i < n; ++i) {
    out += d[i];
    if (d[i] != '-' && (n - 1 - i) % 3 == 0 && i != n - 1) out += ',';
  }
  return out;
}

}  // namespace weft
