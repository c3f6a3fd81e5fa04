// Read-only view of a GGUF file (ggml's model container, versions 2 and 3): header, metadata
// key/values of every value type (arrays included), tensor infos and the aligned data section.
// The file is memory-mapped; every read is bounds-checked, so a truncated or corrupt file gives
// an absl::Status naming what is wrong instead of reading past the end.
#ifndef OSCARKV_LIB_MODEL_GGUF_FILE_H_
#define OSCARKV_LIB_MODEL_GGUF_FILE_H_

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

// ggml tensor types (the numbering is ggml's `enum ggml_type`; only the ones we name here).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kBF16 = 30,
};

// Name of a ggml type ("Q4_1"), or "type<N>" for numbers we do not know.
std::string GgmlTypeName(uint32_t type);
// Elements per block and bytes per block of `type`; false when the type is unknown to us.
bool GgmlBlockInfo(uint32_t type, int64_t* block_elems, int64_t* block_bytes);

// GGUF metadata value types (gguf_type).
enum class GgufValueType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// One metadata value. Scalars fill exactly one of i/u/f/b/s according to `type` (all integer
// types also fill `i` and `u` when representable; floats fill `f`). Arrays set `type = kArray`,
// `array_type` to the element type and hold elements in `array`.
struct GgufValue {
  GgufValueType type = GgufValueType::kUint8;   // Default: kUint8
  GgufValueType array_type = GgufValueType::kUint8;  // element type when type == kArray
  int64_t i = 0;        // integer value (signed view); Default: 0
  uint64_t u = 0;       // integer value (unsigned view); Default: 0
  double f = 0;         // float value; Default: 0
  bool b = false;       // bool value; Default: false
  std::string s;        // string value
  std::vector<GgufValue> array;  // array elements

  bool IsInteger() const;
  bool IsFloat() const;
};

// One tensor's description. `dims[0]` is the fastest-varying dimension (ggml's ne[0]); a
// weight matrix of a linear layer y = W x has dims {in, out}, stored as `out` rows of `in`.
struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;
  uint32_t type = 0;         // GgmlType value; Default: 0 (F32)
  uint64_t offset = 0;       // from the start of the data section; Default: 0
  int64_t num_elements = 0;  // product of dims; Default: 0
  uint64_t num_bytes = 0;    // bytes in the file; Default: 0
  const uint8_t* data = nullptr;  // points into the mapping; valid while the GgufFile lives
};

class GgufFile {
 public:
  // Maps and parses `path`.
  // @return kNotFound (cannot open), kInvalidArgument/kDataLoss (not GGUF, truncated, corrupt;
  //   the message names the field or tensor), kUnimplemented (unsupported version).
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);
  // Parses an in-memory image (copied). Same errors as Open.
  static absl::StatusOr<std::unique_ptr<GgufFile>> FromBytes(std::string_view bytes);

  ~GgufFile() = default;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

  // The value for `key`, or nullptr.
  const GgufValue* Find(std::string_view key) const;
  // Typed getters: kNotFound when absent, kInvalidArgument when of another type.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;  // accepts integers too
  absl::StatusOr<std::string> GetString(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(std::string_view key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(std::string_view key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(std::string_view key) const;

  // The tensor named `name`, or nullptr.
  const GgufTensorInfo* FindTensor(std::string_view name) const;

 private:
  GgufFile() = default;
  absl::Status Parse();

  FileBytes bytes_;
  const uint8_t* base_ = nullptr;  // bytes_.data()
  size_t size_ = 0;                // bytes_.size()
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::map<std::string, GgufValue> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace oscarkv::model

#endif  // OSCARKV_LIB_MODEL_GGUF_FILE_H_
