#include "lib/model/file_bytes.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace oscarkv::model {

FileBytes::~FileBytes() { Reset(); }

FileBytes::FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this == &other) return *this;
  Reset();
  mapping_ = std::exchange(other.mapping_, nullptr);
  size_ = std::exchange(other.size_, 0);
  owned_ = std::move(other.owned_);
  base_ = mapping_ != nullptr ? static_cast<const uint8_t*>(mapping_)
                              : reinterpret_cast<const uint8_t*>(owned_.data());
  other.base_ = nullptr;
  other.owned_.clear();
  return *this;
}

void FileBytes::Reset() {
  if (mapping_ != nullptr) munmap(mapping_, size_);
  mapping_ = nullptr;
  base_ = nullptr;
  size_ = 0;
  owned_.clear();
}

absl::StatusOr<FileBytes> FileBytes::Map(const std::string& path, std::string_view kind) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open ", std::string(kind), " file '", path,
                                            "': ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    return absl::NotFoundError(absl::StrCat("cannot stat '", path, "'"));
  }
  FileBytes f;
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (m == MAP_FAILED) {
      return absl::InternalError(absl::StrCat("mmap of '", path, "' failed: ", std::strerror(errno)));
    }
    f.mapping_ = m;
    f.base_ = static_cast<const uint8_t*>(m);
    f.size_ = size;
  } else {
    ::close(fd);
  }
  return f;
}

FileBytes FileBytes::Own(std::string_view bytes) {
  FileBytes f;
  f.owned_.assign(bytes.data(), bytes.size());
  f.base_ = reinterpret_cast<const uint8_t*>(f.owned_.data());
  f.size_ = f.owned_.size();
  return f;
}

}  // namespace oscarkv::model
