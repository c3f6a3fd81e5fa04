#include "lib/model/safetensors_file.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/match.h"
#include "lib/base/status_macros.h"
#include "lib/kvformat/float16.h"
#include "nlohmann/json.hpp"

namespace oscarkv::model {
namespace {

using Json = nlohmann::json;

// Bytes per element of a safetensors dtype name; 0 for names the format does not define.
int ElementBytes(std::string_view d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

SafetensorsDtype DtypeOf(std::string_view d) {
  if (d == "F32") return SafetensorsDtype::kF32;
  if (d == "F16") return SafetensorsDtype::kF16;
  if (d == "BF16") return SafetensorsDtype::kBF16;
  return SafetensorsDtype::kOther;
}

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool IsFile(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  OSCARKV_ASSIGN_OR_RETURN(FileBytes bytes, FileBytes::Map(path, "safetensors"));
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->label_ = path;
  file->bytes_ = std::move(bytes);
  file->base_ = file->bytes_.data();
  file->size_ = file->bytes_.size();
  absl::Status s = file->Parse();
  if (!s.ok()) return Annotate(s, path);
  return file;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromBytes(std::string_view bytes) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->bytes_ = FileBytes::Own(bytes);
  file->base_ = file->bytes_.data();
  file->size_ = file->bytes_.size();
  file->label_ = "<memory>";
  OSCARKV_RETURN_IF_ERROR(file->Parse());
  return file;
}

absl::Status SafetensorsFile::Parse() {
  if (size_ < 8) {
    return absl::DataLossError(
        absl::StrCat("safetensors file of ", size_, " bytes is shorter than its 8-byte header length"));
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | base_[i];  // little-endian, any host
  if (n > kMaxHeaderBytes || n > size_ - 8) {
    return absl::DataLossError(absl::StrCat("safetensors header length ", n, " exceeds the ",
                                            size_ - 8, " bytes after it (truncated or not safetensors)"));
  }
  const char* hdr = reinterpret_cast<const char*>(base_ + 8);
  // nlohmann throws on malformed input unless asked not to; we never let it throw.
  Json j = Json::parse(hdr, hdr + n, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::DataLossError("safetensors header is not a JSON object (corrupt)");
  }
  const uint8_t* data = base_ + 8 + n;
  const uint64_t data_size = size_ - 8 - n;
  struct Range {
    uint64_t begin, end;
    size_t index;
  };
  std::vector<Range> ranges;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const Json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return absl::DataLossError("safetensors __metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (m.value().is_string()) metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto bad = [&](const std::string& what) {
      return absl::DataLossError(absl::StrCat("safetensors tensor '", name, "': ", what));
    };
    if (!v.is_object()) return bad("entry is not an object");
    auto d = v.find("dtype");
    auto s = v.find("shape");
    auto o = v.find("data_offsets");
    if (d == v.end() || !d->is_string()) return bad("missing or non-string dtype");
    if (s == v.end() || !s->is_array()) return bad("missing or non-array shape");
    if (o == v.end() || !o->is_array() || o->size() != 2) return bad("data_offsets is not [begin, end]");
    SafetensorsTensor t;
    t.name = name;
    t.dtype_name = d->get<std::string>();
    t.dtype = DtypeOf(t.dtype_name);
    const int esize = ElementBytes(t.dtype_name);
    if (esize == 0) return bad(absl::StrCat("unknown dtype '", t.dtype_name, "'"));
    uint64_t elems = 1;
    for (const Json& dim : *s) {
      if (!dim.is_number_unsigned()) return bad("shape has a negative or non-integer dimension");
      const uint64_t x = dim.get<uint64_t>();
      if (x != 0 && elems > (uint64_t{1} << 62) / x) return bad("shape overflows");
      elems *= x;
      t.shape.push_back(static_cast<int64_t>(x));
    }
    if (!(*o)[0].is_number_unsigned() || !(*o)[1].is_number_unsigned()) {
      return bad("data_offsets are not non-negative integers");
    }
    const uint64_t b = (*o)[0].get<uint64_t>(), e = (*o)[1].get<uint64_t>();
    if (b > e) return bad(absl::StrCat("data_offsets [", b, ", ", e, ") end before they begin"));
    if (e > data_size) {
      return bad(absl::StrCat("data_offsets [", b, ", ", e, ") extend past the ", data_size,
                              "-byte data section (truncated)"));
    }
    if (e - b != elems * esize) {
      return bad(absl::StrCat("holds ", e - b, " bytes but shape x ", t.dtype_name, " needs ",
                              elems * esize));
    }
    if (b % esize != 0) {
      return bad(absl::StrCat("offset ", b, " is not a multiple of its ", esize,
                              "-byte element size (misaligned)"));
    }
    t.num_elements = static_cast<int64_t>(elems);
    t.num_bytes = e - b;
    t.data = data + b;
    ranges.push_back({b, e, tensors_.size()});
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return absl::DataLossError(absl::StrCat(
          "safetensors tensors '", tensors_[ranges[i - 1].index].name, "' and '",
          tensors_[ranges[i].index].name, "' overlap (corrupt)"));
    }
  }
  return absl::OkStatus();
}

const SafetensorsTensor* SafetensorsFile::FindTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status SafetensorsCheckpoint::Add(std::unique_ptr<SafetensorsFile> file,
                                        const std::string& label) {
  for (const SafetensorsTensor& t : file->tensors()) {
    if (!index_.emplace(t.name, &t).second) {
      return absl::DataLossError(
          absl::StrCat("tensor '", t.name, "' appears in more than one shard (", label, ")"));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& path) {
  std::unique_ptr<SafetensorsCheckpoint> ckpt(new SafetensorsCheckpoint());
  if (!IsDir(path)) {
    OSCARKV_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(path));
    OSCARKV_RETURN_IF_ERROR(ckpt->Add(std::move(f), path));
    return ckpt;
  }
  const std::string index_path = path + "/model.safetensors.index.json";
  if (IsFile(index_path)) {
    std::ifstream in(index_path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    Json j = Json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
    auto wm = j.is_object() ? j.find("weight_map") : j.end();
    if (j.is_discarded() || !j.is_object() || wm == j.end() || !wm->is_object()) {
      return absl::DataLossError(absl::StrCat("'", index_path, "' has no weight_map object"));
    }
    std::set<std::string> shards;
    std::map<std::string, std::string> expected;  // tensor -> shard
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return absl::DataLossError(absl::StrCat("'", index_path, "': weight_map['", it.key(),
                                                "'] is not a file name"));
      }
      const std::string shard = it.value().get<std::string>();
      if (shard.empty() || absl::StrContains(shard, "/")) {
        return absl::DataLossError(absl::StrCat("'", index_path, "': bad shard name '", shard, "'"));
      }
      shards.insert(shard);
      expected[it.key()] = shard;
    }
    for (const std::string& shard : shards) {
      const std::string p = path + "/" + shard;
      OSCARKV_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(p));
      OSCARKV_RETURN_IF_ERROR(ckpt->Add(std::move(f), p));
    }
    for (const auto& [name, shard] : expected) {
      if (ckpt->FindTensor(name) == nullptr) {
        return absl::DataLossError(absl::StrCat("'", index_path, "' lists tensor '", name,
                                                "' in '", shard, "', which lacks it"));
      }
    }
    return ckpt;
  }
  const std::string single = path + "/model.safetensors";
  if (!IsFile(single)) {
    return absl::NotFoundError(absl::StrCat(
        "'", path, "' has neither model.safetensors nor model.safetensors.index.json"));
  }
  OSCARKV_ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single));
  OSCARKV_RETURN_IF_ERROR(ckpt->Add(std::move(f), single));
  return ckpt;
}

const SafetensorsTensor* SafetensorsCheckpoint::FindTensor(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : it->second;
}

absl::Status SafetensorsToFloat32(const SafetensorsTensor& t, float* out) {
  const uint8_t* p = t.data;
  switch (t.dtype) {
    case SafetensorsDtype::kF32:
      std::memcpy(out, p, t.num_elements * sizeof(float));
      return absl::OkStatus();
    case SafetensorsDtype::kF16:
      for (int64_t i = 0; i < t.num_elements; ++i) {
        out[i] = kvformat::HalfBitsToFloat(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      }
      return absl::OkStatus();
    case SafetensorsDtype::kBF16:
      for (int64_t i = 0; i < t.num_elements; ++i) {
        out[i] = kvformat::Bf16BitsToFloat(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      }
      return absl::OkStatus();
    case SafetensorsDtype::kOther:
      break;
  }
  return absl::UnimplementedError(absl::StrCat("tensor '", t.name, "' has dtype ", t.dtype_name,
                                               " (only F32, F16 and BF16 are supported)"));
}

}  // namespace oscarkv::model
