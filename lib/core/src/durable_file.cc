#include "weft/core/durable_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

namespace weft {

namespace {

std::string reason() { return std::strerror(errno); }

// Buffers writes to a file descriptor; the first failure is kept and reported once.
class FdSink final : public ByteSink {
 public:
  explicit FdSink(int fd) : fd_(fd) { buf_.reserve(kBuffer); }
  void write(const void* data, std::size_t n) override {
    const char* p = static_cast<const char*>(data);
    if (n >= kBuffer) {
      flush();
      put(p, n);
      return;
    }
    if (buf_.size() + n > kBuffer) flush();
    buf_.insert(buf_.end(), p, p + n);
  }
  using ByteSink::write;
  bool flush() {
    put(buf_.data(), buf_.size());
    buf_.clear();
    return error_.empty();
  }
  const std::string& error() const { return error_; }

 private:
  static constexpr std::size_t kBuffer = 1 << 20;
  void put(const char* p, std::size_t n) {
    while (n > 0 && error_.empty()) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        error_ = reason();
        return;
      }
      p += w;
      n -= static_cast<std::size_t>(w);
    }
  }
  int fd_;
  std::vector<char> buf_;
  std::string error_;
};

std::string parent_of(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).parent_path();
  return p.empty() ? std::string(".") : p.string();
}

}  // namespace

Status sync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Error{ErrorKind::kIo, dir + ": cannot open the directory to sync it: " + reason()};
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? reason() : "";
  ::close(fd);
  if (rc != 0) return Error{ErrorKind::kIo, dir + ": fsync of the directory failed: " + why};
  return {};
}

Status write_file_durably(const std::string& path, const std::function<void(ByteSink&)>& fill) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Error{ErrorKind::kIo, path + ": cannot open " + tmp + " for writing: " + reason()};
  auto fail = [&](const std::string& what) -> Status {
    ::close(fd);
    std::remove(tmp.c_str());
    return Error{ErrorKind::kIo, path + ": " + what};
  };
  FdSink sink(fd);
  try {
    fill(sink);
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  if (!sink.flush()) return fail("write failed: " + sink.error());
  if (::fsync(fd) != 0) return fail("fsync failed: " + reason());
  if (::close(fd) != 0) {
    const std::string why = reason();
    std::remove(tmp.c_str());
    return Error{ErrorKind::kIo, path + ": close failed: " + why};
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = reason();
    std::remove(tmp.c_str());
    return Error{ErrorKind::kIo, path + ": cannot rename " + tmp + " into place: " + why};
  }
  return sync_directory(parent_of(path));
}

}  // namespace weft
