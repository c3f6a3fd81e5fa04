#include "lib/model/gguf_file.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace oscarkv::model {
namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
// Guards against absurd counts in corrupt headers before we allocate.
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 30;
constexpr int kMaxArrayDepth = 4;

// Bounds-checked little-endian reader over [data, data + size).
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  absl::Status Bytes(void* out, size_t n, const std::string& what) {
    if (n > remaining()) {
      return absl::DataLossError(absl::StrCat("GGUF truncated while reading ", what, " at offset ",
                                              pos_, " (need ", n, " bytes, ", remaining(),
                                              " left)"));
    }
    std::memcpy(out, data_ + pos_, n);
    pos_ += n;
    return absl::OkStatus();
  }
  template <typename T>
  absl::StatusOr<T> Get(const std::string& what) {
    T v;
    OSCARKV_RETURN_IF_ERROR(Bytes(&v, sizeof(T), what));
    return v;
  }
  absl::StatusOr<std::string> String(const std::string& what) {
    OSCARKV_ASSIGN_OR_RETURN(uint64_t n, Get<uint64_t>(what));
    if (n > kMaxStringBytes || n > remaining()) {
      return absl::DataLossError(absl::StrCat("GGUF ", what, " has length ", n, " at offset ",
                                              pos_ - 8, " but only ", remaining(),
                                              " bytes remain (truncated or corrupt)"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

size_t ScalarSize(GgufValueType t) {
  switch (t) {
    case GgufValueType::kUint8:
    case GgufValueType::kInt8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kUint16:
    case GgufValueType::kInt16:
      return 2;
    case GgufValueType::kUint32:
    case GgufValueType::kInt32:
    case GgufValueType::kFloat32:
      return 4;
    case GgufValueType::kUint64:
    case GgufValueType::kInt64:
    case GgufValueType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

absl::Status ReadValue(Reader& r, GgufValueType type, const std::string& key, int depth,
                       GgufValue* out) {
  out->type = type;
  const std::string what = absl::StrCat("value of '", key, "'");
  switch (type) {
    case GgufValueType::kUint8: {
      OSCARKV_ASSIGN_OR_RETURN(uint8_t v, r.Get<uint8_t>(what));
      out->u = v;
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kInt8: {
      OSCARKV_ASSIGN_OR_RETURN(int8_t v, r.Get<int8_t>(what));
      out->i = v;
      out->u = static_cast<uint64_t>(v);
      return absl::OkStatus();
    }
    case GgufValueType::kUint16: {
      OSCARKV_ASSIGN_OR_RETURN(uint16_t v, r.Get<uint16_t>(what));
      out->u = v;
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kInt16: {
      OSCARKV_ASSIGN_OR_RETURN(int16_t v, r.Get<int16_t>(what));
      out->i = v;
      out->u = static_cast<uint64_t>(v);
      return absl::OkStatus();
    }
    case GgufValueType::kUint32: {
      OSCARKV_ASSIGN_OR_RETURN(uint32_t v, r.Get<uint32_t>(what));
      out->u = v;
      out->i = v;
      return absl::OkStatus();
    }
    case GgufValueType::kInt32: {
      OSCARKV_ASSIGN_OR_RETURN(int32_t v, r.Get<int32_t>(what));
      out->i = v;
      out->u = static_cast<uint64_t>(v);
      return absl::OkStatus();
    }
    case GgufValueType::kUint64: {
      OSCARKV_ASSIGN_OR_RETURN(uint64_t v, r.Get<uint64_t>(what));
      out->u = v;
      out->i = static_cast<int64_t>(v);
      return absl::OkStatus();
    }
    case GgufValueType::kInt64: {
      OSCARKV_ASSIGN_OR_RETURN(int64_t v, r.Get<int64_t>(what));
      out->i = v;
      out->u = static_cast<uint64_t>(v);
      return absl::OkStatus();
    }
    case GgufValueType::kFloat32: {
      OSCARKV_ASSIGN_OR_RETURN(float v, r.Get<float>(what));
      out->f = v;
      return absl::OkStatus();
    }
    case GgufValueType::kFloat64: {
      OSCARKV_ASSIGN_OR_RETURN(double v, r.Get<double>(what));
      out->f = v;
      return absl::OkStatus();
    }
    case GgufValueType::kBool: {
      OSCARKV_ASSIGN_OR_RETURN(uint8_t v, r.Get<uint8_t>(what));
      if (v > 1) {
        return absl::DataLossError(
            absl::StrCat("GGUF bool ", what, " has byte value ", v, " (corrupt)"));
      }
      out->b = v != 0;
      out->i = v;
      out->u = v;
      return absl::OkStatus();
    }
    case GgufValueType::kString: {
      OSCARKV_ASSIGN_OR_RETURN(out->s, r.String(what));
      return absl::OkStatus();
    }
    case GgufValueType::kArray: {
      if (depth >= kMaxArrayDepth) {
        return absl::DataLossError(absl::StrCat("GGUF array nesting too deep in '", key, "'"));
      }
      OSCARKV_ASSIGN_OR_RETURN(uint32_t et, r.Get<uint32_t>(absl::StrCat("array type of '", key, "'")));
      if (et > static_cast<uint32_t>(GgufValueType::kFloat64)) {
        return absl::DataLossError(
            absl::StrCat("GGUF array '", key, "' has unknown element type ", et));
      }
      OSCARKV_ASSIGN_OR_RETURN(uint64_t n, r.Get<uint64_t>(absl::StrCat("array length of '", key, "'")));
      const GgufValueType etype = static_cast<GgufValueType>(et);
      // Every element takes at least one byte (strings at least 8), so a count larger than
      // what is left is corrupt; checking first avoids huge allocations.
      const size_t min_elem = etype == GgufValueType::kString ? 8
                              : etype == GgufValueType::kArray ? 12
                                                                : ScalarSize(etype);
      if (n > r.remaining() / min_elem) {
        return absl::DataLossError(absl::StrCat("GGUF array '", key, "' claims ", n,
                                                " elements but only ", r.remaining(),
                                                " bytes remain (truncated or corrupt)"));
      }
      out->array_type = etype;
      out->array.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        OSCARKV_RETURN_IF_ERROR(ReadValue(r, etype, key, depth + 1, &out->array[i]));
      }
      return absl::OkStatus();
    }
  }
  return absl::DataLossError(
      absl::StrCat("GGUF key '", key, "' has unknown value type ", static_cast<uint32_t>(type)));
}

}  // namespace

std::string GgmlTypeName(uint32_t type) {
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ8_1: return "Q8_1";
    case GgmlType::kQ2_K: return "Q2_K";
    case GgmlType::kQ3_K: return "Q3_K";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kQ8_K: return "Q8_K";
    case GgmlType::kBF16: return "BF16";
  }
  return absl::StrCat("type", type);
}

bool GgmlBlockInfo(uint32_t type, int64_t* block_elems, int64_t* block_bytes) {
  int64_t e = 0, b = 0;
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::kF32: e = 1; b = 4; break;
    case GgmlType::kF16: e = 1; b = 2; break;
    case GgmlType::kBF16: e = 1; b = 2; break;
    case GgmlType::kQ4_0: e = 32; b = 18; break;
    case GgmlType::kQ4_1: e = 32; b = 20; break;
    case GgmlType::kQ5_0: e = 32; b = 22; break;
    case GgmlType::kQ5_1: e = 32; b = 24; break;
    case GgmlType::kQ8_0: e = 32; b = 34; break;
    case GgmlType::kQ8_1: e = 32; b = 36; break;
    case GgmlType::kQ2_K: e = 256; b = 84; break;
    case GgmlType::kQ3_K: e = 256; b = 110; break;
    case GgmlType::kQ4_K: e = 256; b = 144; break;
    case GgmlType::kQ5_K: e = 256; b = 176; break;
    case GgmlType::kQ6_K: e = 256; b = 210; break;
    case GgmlType::kQ8_K: e = 256; b = 292; break;
    default: return false;
  }
  *block_elems = e;
  *block_bytes = b;
  return true;
}

bool GgufValue::IsInteger() const {
  switch (type) {
    case GgufValueType::kUint8: case GgufValueType::kInt8: case GgufValueType::kUint16:
    case GgufValueType::kInt16: case GgufValueType::kUint32: case GgufValueType::kInt32:
    case GgufValueType::kUint64: case GgufValueType::kInt64:
      return true;
    default:
      return false;
  }
}

bool GgufValue::IsFloat() const {
  return type == GgufValueType::kFloat32 || type == GgufValueType::kFloat64;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  OSCARKV_ASSIGN_OR_RETURN(FileBytes bytes, FileBytes::Map(path, "GGUF"));
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->bytes_ = std::move(bytes);
  file->base_ = file->bytes_.data();
  file->size_ = file->bytes_.size();
  absl::Status s = file->Parse();
  if (!s.ok()) return Annotate(s, path);
  return file;
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::FromBytes(std::string_view bytes) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->bytes_ = FileBytes::Own(bytes);
  file->base_ = file->bytes_.data();
  file->size_ = file->bytes_.size();
  OSCARKV_RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::Status GgufFile::Parse() {
  Reader r(base_, size_);
  OSCARKV_ASSIGN_OR_RETURN(uint32_t magic, r.Get<uint32_t>("magic"));
  if (magic != kGgufMagic) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a GGUF file (magic 0x", absl::Hex(magic), ", expected \"GGUF\")"));
  }
  OSCARKV_ASSIGN_OR_RETURN(version_, r.Get<uint32_t>("version"));
  if (version_ != 2 && version_ != 3) {
    return absl::UnimplementedError(
        absl::StrCat("GGUF version ", version_, " unsupported (only 2 and 3)"));
  }
  OSCARKV_ASSIGN_OR_RETURN(uint64_t n_tensors, r.Get<uint64_t>("tensor count"));
  OSCARKV_ASSIGN_OR_RETURN(uint64_t n_kv, r.Get<uint64_t>("metadata count"));
  // Each KV needs >= 13 bytes and each tensor info >= 24.
  if (n_kv > r.remaining() / 13 || n_tensors > r.remaining() / 24) {
    return absl::DataLossError(absl::StrCat("GGUF header claims ", n_kv, " metadata entries and ",
                                            n_tensors, " tensors, more than the ", size_,
                                            "-byte file can hold (truncated or corrupt)"));
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    OSCARKV_ASSIGN_OR_RETURN(std::string key, r.String(absl::StrCat("metadata key #", i)));
    OSCARKV_ASSIGN_OR_RETURN(uint32_t t, r.Get<uint32_t>(absl::StrCat("value type of '", key, "'")));
    if (t > static_cast<uint32_t>(GgufValueType::kFloat64)) {
      return absl::DataLossError(
          absl::StrCat("GGUF key '", key, "' has unknown value type ", t, " (corrupt)"));
    }
    GgufValue value;
    OSCARKV_RETURN_IF_ERROR(ReadValue(r, static_cast<GgufValueType>(t), key, 0, &value));
    metadata_[key] = std::move(value);
  }
  if (const GgufValue* a = Find("general.alignment"); a != nullptr) {
    if (!a->IsInteger() || a->u == 0 || (a->u & (a->u - 1)) != 0) {
      return absl::DataLossError("GGUF general.alignment is not a power of two");
    }
    alignment_ = a->u;
  }
  tensors_.resize(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo& t = tensors_[i];
    OSCARKV_ASSIGN_OR_RETURN(t.name, r.String(absl::StrCat("name of tensor #", i)));
    OSCARKV_ASSIGN_OR_RETURN(uint32_t n_dims, r.Get<uint32_t>(absl::StrCat("rank of '", t.name, "'")));
    if (n_dims == 0 || n_dims > 4) {
      return absl::DataLossError(
          absl::StrCat("tensor '", t.name, "' has rank ", n_dims, " (expected 1..4; corrupt)"));
    }
    t.num_elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      OSCARKV_ASSIGN_OR_RETURN(uint64_t dim, r.Get<uint64_t>(absl::StrCat("dims of '", t.name, "'")));
      if (dim == 0 || dim > (uint64_t{1} << 40) ||
          static_cast<uint64_t>(t.num_elements) > (uint64_t{1} << 50) / dim) {
        return absl::DataLossError(
            absl::StrCat("tensor '", t.name, "' has implausible dimension ", dim, " (corrupt)"));
      }
      t.dims.push_back(static_cast<int64_t>(dim));
      t.num_elements *= static_cast<int64_t>(dim);
    }
    OSCARKV_ASSIGN_OR_RETURN(t.type, r.Get<uint32_t>(absl::StrCat("type of '", t.name, "'")));
    OSCARKV_ASSIGN_OR_RETURN(t.offset, r.Get<uint64_t>(absl::StrCat("offset of '", t.name, "'")));
    int64_t be = 0, bb = 0;
    if (!GgmlBlockInfo(t.type, &be, &bb)) {
      return absl::UnimplementedError(absl::StrCat("tensor '", t.name, "' has ggml type ",
                                                   GgmlTypeName(t.type), " which we cannot read"));
    }
    if (t.dims[0] % be != 0) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' row length ", t.dims[0],
                                              " is not a multiple of the ", GgmlTypeName(t.type),
                                              " block size ", be));
    }
    t.num_bytes = static_cast<uint64_t>(t.num_elements / be * bb);
    if (t.offset % alignment_ != 0) {
      return absl::DataLossError(absl::StrCat("tensor '", t.name, "' offset ", t.offset,
                                              " is not aligned to ", alignment_));
    }
    tensor_index_[t.name] = i;
  }
  const uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  for (GgufTensorInfo& t : tensors_) {
    if (data_start > size_ || t.offset > size_ - data_start ||
        t.num_bytes > size_ - data_start - t.offset) {
      return absl::DataLossError(absl::StrCat(
          "tensor '", t.name, "' data [", data_start + t.offset, ", ",
          data_start + t.offset + t.num_bytes, ") extends past the end of the ", size_,
          "-byte file (truncated)"));
    }
    t.data = base_ + data_start + t.offset;
  }
  return absl::OkStatus();
}

const GgufValue* GgufFile::Find(std::string_view key) const {
  auto it = metadata_.find(std::string(key));
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {
absl::StatusOr<const GgufValue*> FindOrError(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.Find(key);
  if (v == nullptr) return absl::NotFoundError(absl::StrCat("GGUF metadata lacks '", std::string(key), "'"));
  return v;
}
absl::Status WrongType(std::string_view key, std::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("GGUF metadata '", std::string(key), "' is not ", std::string(want)));
}
}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  OSCARKV_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(*this, key));
  if (!v->IsInteger()) return WrongType(key, "an integer");
  return v->i;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  OSCARKV_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(*this, key));
  if (v->IsFloat()) return v->f;
  if (v->IsInteger()) return static_cast<double>(v->i);
  return WrongType(key, "a number");
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  OSCARKV_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(*this, key));
  if (v->type != GgufValueType::kString) return WrongType(key, "a string");
  return v->s;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  OSCARKV_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(*this, key));
  if (v->type != GgufValueType::kBool) return WrongType(key, "a bool");
  return v->b;
}

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(std::string_view key) const {
  OSCARKV_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(*this, key));
  if (v->type != GgufValueType::kArray || v->array_type != GgufValueType::kString) {
    return WrongType(key, "an array of strings");
  }
  std::vector<std::string> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) out.push_back(e.s);
  return out;
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(std::string_view key) const {
  OSCARKV_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(*this, key));
  if (v->type != GgufValueType::kArray) return WrongType(key, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    if (!e.IsInteger()) return WrongType(key, "an array of integers");
    out.push_back(e.i);
  }
  return out;
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(std::string_view key) const {
  OSCARKV_ASSIGN_OR_RETURN(const GgufValue* v, FindOrError(*this, key));
  if (v->type != GgufValueType::kArray) return WrongType(key, "an array of numbers");
  std::vector<double> out;
  out.reserve(v->array.size());
  for (const GgufValue& e : v->array) {
    if (e.IsFloat()) {
      out.push_back(e.f);
    } else if (e.IsInteger()) {
      out.push_back(static_cast<double>(e.i));
    } else {
      return WrongType(key, "an array of numbers");
    }
  }
  return out;
}

}  // namespace oscarkv::model
