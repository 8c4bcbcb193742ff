// Strong unit types for the cost model: seconds, bytes, FLOPs and rates are distinct types, so a
// bytes/seconds or GB/GiB mix-up does not compile. All values are stored in SI base units
// (seconds, bytes, FLOPs); the named constructors below convert from the units people write.
#pragma once

#include <compare>

namespace weft {

template <class Tag>
class Quantity {
 public:
  constexpr Quantity() = default;
  constexpr explicit Quantity(double v) : v_(v) {}
  [[nodiscard]] constexpr double value() const { return v_; }

  constexpr Quantity& operator+=(Quantity o) { v_ += o.v_; return *this; }
  constexpr Quantity& operator-=(Quantity o) { v_ -= o.v_; return *this; }
  constexpr Quantity& operator*=(double k) { v_ *= k; return *this; }
  constexpr Quantity& operator/=(double k) { v_ /= k; return *this; }
  friend constexpr Quantity operator+(Quantity a, Quantity b) { return Quantity(a.v_ + b.v_); }
  friend constexpr Quantity operator-(Quantity a, Quantity b) { return Quantity(a.v_ - b.v_); }
  friend constexpr Quantity operator*(Quantity a, double k) { return Quantity(a.v_ * k); }
  friend constexpr Quantity operator*(double k, Quantity a) { return Quantity(a.v_ * k); }
  friend constexpr Quantity operator/(Quantity a, double k) { return Quantity(a.v_ / k); }
  // The ratio of two quantities of one kind is a plain number.
  friend constexpr double operator/(Quantity a, Quantity b) { return a.v_ / b.v_; }
  friend constexpr auto operator<=>(Quantity a, Quantity b) = default;
  friend constexpr bool operator==(Quantity a, Quantity b) = default;

 private:
  double v_ = 0.0;
};

struct SecondsTag {};
struct BytesTag {};
struct FlopsTag {};
struct BytesPerSecondTag {};
struct FlopsPerSecondTag {};

using Seconds = Quantity<SecondsTag>;
using Bytes = Quantity<BytesTag>;
using Flops = Quantity<FlopsTag>;
using BytesPerSecond = Quantity<BytesPerSecondTag>;
using FlopsPerSecond = Quantity<FlopsPerSecondTag>;

constexpr Seconds operator/(Bytes b, BytesPerSecond r) { return Seconds(b.value() / r.value()); }
constexpr Seconds operator/(Flops f, FlopsPerSecond r) { return Seconds(f.value() / r.value()); }
constexpr Bytes operator*(BytesPerSecond r, Seconds t) { return Bytes(r.value() * t.value()); }
constexpr Flops operator*(FlopsPerSecond r, Seconds t) { return Flops(r.value() * t.value()); }
constexpr FlopsPerSecond operator/(Flops f, Seconds t) { return FlopsPerSecond(f.value() / t.value()); }

// Named constructors. GB/MB are decimal (10^9, 10^6), GiB/MiB binary (2^30, 2^20).
constexpr Seconds sec(double s) { return Seconds(s); }
constexpr Seconds ms(double x) { return Seconds(x * 1e-3); }
constexpr Seconds us(double x) { return Seconds(x * 1e-6); }
constexpr Bytes bytes(double b) { return Bytes(b); }
constexpr Bytes MiB(double x) { return Bytes(x * 1048576.0); }
constexpr Bytes GiB(double x) { return Bytes(x * 1073741824.0); }
constexpr Bytes MB(double x) { return Bytes(x * 1e6); }
constexpr Bytes GB(double x) { return Bytes(x * 1e9); }
constexpr BytesPerSecond GBps(double x) { return BytesPerSecond(x * 1e9); }
constexpr FlopsPerSecond TFLOPs(double x) { return FlopsPerSecond(x * 1e12); }

constexpr double to_gib(Bytes b) { return b.value() / 1073741824.0; }
constexpr double to_mib(Bytes b) { return b.value() / 1048576.0; }

}  // namespace weft
