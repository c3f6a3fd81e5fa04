// The bytes of a model file: memory-mapped read-only from disk, or owned in memory (tests,
// in-memory fixtures). GgufFile and SafetensorsFile parse through it. Move-only.
#ifndef OSCARKV_LIB_MODEL_FILE_BYTES_H_
#define OSCARKV_LIB_MODEL_FILE_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace oscarkv::model {

class FileBytes {
 public:
  FileBytes() = default;
  ~FileBytes();
  FileBytes(FileBytes&& other) noexcept;
  FileBytes& operator=(FileBytes&& other) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;

  // Maps `path` read-only. `kind` names the format in errors ("GGUF", "safetensors").
  // @return kNotFound when it cannot be opened or stat'ed; kInternal when mmap fails.
  static absl::StatusOr<FileBytes> Map(const std::string& path, std::string_view kind);
  // A copy of `bytes`.
  static FileBytes Own(std::string_view bytes);

  const uint8_t* data() const { return base_; }
  size_t size() const { return size_; }

 private:
  void Reset();
  const uint8_t* base_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // mmap'd region, or nullptr when `owned_` holds the bytes
  std::string owned_;
};

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_FILE_BYTES_H_
