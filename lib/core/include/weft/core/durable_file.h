// Durable, atomic file writes: what is written survives a killed process and an OS crash or power
// loss, and a reader never sees a half-written file.
//
// write_file_durably(path, fill) writes fill's bytes to "<path>.tmp" in the same directory,
// fsyncs that file, renames it over `path` (atomic on POSIX file systems) and then fsyncs the
// directory so the rename itself is on disk. On success the new contents are durable. On failure
// `path` is untouched (the old contents, or no file), the temporary file is removed, and the error
// (kIo) names the path, the step that failed and the system's reason. A crash before it returns
// leaves `path` as it was and at most a stale "<path>.tmp".
//
// sync_directory(dir) fsyncs a directory, making its entries (files renamed or created into it,
// subdirectories made in it, entries removed) durable.
//
// Thread-safe for distinct paths; not for two writers of the same path.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "weft/core/error.h"

namespace weft {

// Where fill() puts the file's bytes (buffered; flushed and synced by write_file_durably).
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void write(const void* data, std::size_t n) = 0;
  void write(const std::string& s) { write(s.data(), s.size()); }
};

[[nodiscard]] Status write_file_durably(const std::string& path, const std::function<void(ByteSink&)>& fill);
[[nodiscard]] Status sync_directory(const std::string& dir);

}  // namespace weft
