// Read-only view of Hugging Face safetensors checkpoints: one `.safetensors` file (an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
// then the data), or a sharded checkpoint (`model.safetensors.index.json` mapping tensor names to
// shard files). Files are memory-mapped; the header is validated in full at open, so a truncated,
// corrupt, overlapping or misaligned file gives an absl::Status naming the problem instead of a
// read past the end. Immutable after opening; thread-safe for concurrent const use.
#ifndef OSCARKV_LIB_MODEL_SAFETENSORS_FILE_H_
#define OSCARKV_LIB_MODEL_SAFETENSORS_FILE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "lib/model/file_bytes.h"

namespace oscarkv::model {

// Element types we can convert to float32. Other safetensors dtypes (I8, F64, F8_E4M3, ...) are
// accepted in a file (their sizes are checked) but kOther; converting one is kUnimplemented.
enum class SafetensorsDtype { kF32, kF16, kBF16, kOther };

struct SafetensorsTensor {
  std::string name;
  std::string dtype_name;        // as in the header, e.g. "BF16"
  SafetensorsDtype dtype = SafetensorsDtype::kOther;  // Default: kOther
  std::vector<int64_t> shape;    // outermost first (PyTorch order): a Linear weight is [out, in]
  int64_t num_elements = 0;      // product of shape (1 for a scalar); Default: 0
  uint64_t num_bytes = 0;        // Default: 0
  const uint8_t* data = nullptr;  // into the mapping; valid while the file lives
};

class SafetensorsFile {
 public:
  // Header size limit (as in the safetensors reference implementation).
  static constexpr uint64_t kMaxHeaderBytes = 100 << 20;

  // Maps and validates `path`.
  // @return kNotFound (cannot open); kDataLoss naming the tensor or field for a truncated or
  //   corrupt file: header length past the end, bad JSON, bad dtype/shape/offsets, a byte range
  //   past the end of the data, not matching the shape, overlapping another tensor, or not a
  //   multiple of the element size.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // Parses an in-memory image (copied). Same errors as Open.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromBytes(std::string_view bytes);

  ~SafetensorsFile() = default;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Tensors in header order (the JSON object's key order is not meaningful).
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // The string values of "__metadata__" (e.g. {"format": "pt"}).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor named `name`, or nullptr.
  const SafetensorsTensor* FindTensor(std::string_view name) const;

 private:
  SafetensorsFile() = default;
  absl::Status Parse();

  FileBytes bytes_;
  const uint8_t* base_ = nullptr;  // bytes_.data()
  size_t size_ = 0;                // bytes_.size()
  std::string label_;  // path, for messages
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, size_t, std::less<>> index_;
};

// One checkpoint: a single file or all shards of a sharded one, with one tensor namespace.
class SafetensorsCheckpoint {
 public:
  // `path` is a directory holding model.safetensors.index.json (sharded) or model.safetensors,
  // or a .safetensors file.
  // @return kNotFound when none of those exists or a shard named by the index is missing;
  //   kDataLoss for a malformed index, a tensor present in two shards, or errors of
  //   SafetensorsFile::Open (annotated with the shard).
  static absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);

  // The tensor named `name` in whichever shard holds it, or nullptr.
  const SafetensorsTensor* FindTensor(std::string_view name) const;
  size_t num_files() const { return files_.size(); }
  size_t num_tensors() const { return index_.size(); }

 private:
  SafetensorsCheckpoint() = default;
  absl::Status Add(std::unique_ptr<SafetensorsFile> file, const std::string& label);
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsTensor*, std::less<>> index_;
};

// Converts `t` (F32, F16 or BF16) to float32 into out[0 .. t.num_elements).
// @return kUnimplemented naming the dtype for any other.
absl::Status SafetensorsToFloat32(const SafetensorsTensor& t, float* out);

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_SAFETENSORS_FILE_H_
