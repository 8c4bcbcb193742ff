// Errors as values. Three tiers (see ARCHITECTURE.md): bad user input returns an Error whose message
// names the field and the numbers; a plan that cannot fit is an Error of kind kNoFit; broken
// invariants are asserts. The CLI maps Error::kind to the process exit code.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

#include "weft/core/assert.h"

namespace weft {

enum class ErrorKind {
  kBadInput = 2,  // malformed spec, plan or flag; a degree that does not divide
  kNoFit = 3,     // nothing fits in the memory limit
  kIo = 4,        // a file could not be read or written
  kRuntime = 5,   // a failure while training or profiling (peer died, timeout)
};

struct Error {
  ErrorKind kind = ErrorKind::kBadInput;
  std::string message;

  // Prefixes the message with a context, e.g. the file name: "llama.json: hidden: ...".
  [[nodiscard]] Error with_context(const std::string& ctx) const { return {kind, ctx + ": " + message}; }
};

// The exit code the CLI returns for an error kind.
inline int exit_code(ErrorKind k) { return static_cast<int>(k); }

// Thrown inside parsers and validators and turned into an Error at the public boundary by
// catch_errors(); never escapes a public function that returns Result.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& m, ErrorKind k = ErrorKind::kBadInput)
      : std::runtime_error(m), kind(k) {}
  ErrorKind kind;
};

// Result<T>: a T or an Error. Check ok() before value().
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::move(v)) {}            // NOLINT: implicit by design
  Result(Error e) : v_(std::move(e)) {}        // NOLINT
  [[nodiscard]] bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { WEFT_ASSERT(ok(), "value() of a failed Result"); return std::get<0>(v_); }
  const T& value() const& { WEFT_ASSERT(ok(), "value() of a failed Result"); return std::get<0>(v_); }
  T&& value() && { WEFT_ASSERT(ok(), "value() of a failed Result"); return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }
  [[nodiscard]] const Error& error() const { WEFT_ASSERT(!ok(), "error() of a successful result"); return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

// Status: success or an Error.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : e_(std::move(e)) {}  // NOLINT
  static Status Ok() { return {}; }
  [[nodiscard]] bool ok() const { return !e_.has_value(); }
  explicit operator bool() const { return ok(); }
  [[nodiscard]] const Error& error() const { WEFT_ASSERT(!ok(), "error() of a successful result"); return *e_; }

 private:
  std::optional<Error> e_;
};

namespace detail {
template <class T>
struct AsResult { using type = Result<T>; };
template <class T>
struct AsResult<Result<T>> { using type = Result<T>; };
}  // namespace detail

// Runs f() and turns an InputError (or a std::exception such as nlohmann's) into an Error.
// f may return T or Result<T>; the result is Result<T> either way.
template <class F>
auto catch_errors(F&& f) -> typename detail::AsResult<decltype(f())>::type {
  try {
    return f();
  } catch (const InputError& e) {
    return Error{e.kind, e.what()};
  } catch (const std::exception& e) {
    return Error{ErrorKind::kBadInput, e.what()};
  }
}

// Throws InputError if cond is false. Used by validators; the message should name field and numbers.
inline void require(bool cond, const std::string& message) {
  if (!cond) throw InputError(message);
}

}  // namespace weft
