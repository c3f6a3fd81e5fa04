#include "lib/quant/activation_dump.h"

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "lib/base/status_macros.h"

namespace oscarkv::quant {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr char kNpyMagic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

// Value text after `'key':` in the header dict, trimmed at the next top-level ',' or '}'.
bool FindField(const std::string& header, const std::string& key, std::string* value) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) return false;
  size_t p = header.find(':', k);
  if (p == std::string::npos) return false;
  ++p;
  while (p < header.size() && header[p] == ' ') ++p;
  size_t end = p;
  int depth = 0;
  while (end < header.size()) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
    ++end;
  }
  if (depth != 0 || end >= header.size()) return false;
  *value = header.substr(p, end - p);
  while (!value->empty() && value->back() == ' ') value->pop_back();
  return true;
}

}  // namespace

absl::Status WriteNpy(const std::string& path, std::span<const int64_t> shape,
                      std::span<const float> data) {
  int64_t count = 1;
  for (int64_t s : shape) {
    if (s < 0) return absl::InvalidArgumentError("negative dimension");
    count *= s;
  }
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    absl::StrAppend(&dims, i ? ", " : "", shape[i]);
  }
  if (shape.size() == 1) dims += ",";
  if (static_cast<size_t>(count) != data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy data has ", data.size(), " floats, shape needs ", count));
  }
  std::string header =
      absl::StrCat("{'descr': '<f4', 'fortran_order': False, 'shape': (", dims, "), }");
  // Pad with spaces so that magic + version + length + header (ending in '\n') is 64-aligned.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 0xffff) return absl::InvalidArgumentError("npy header too long");
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError("cannot open " + path + " for writing");
  out.write(kNpyMagic, 6);
  const char version[2] = {1, 0};
  out.write(version, 2);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_le[2] = {static_cast<char>(len & 0xff), static_cast<char>(len >> 8)};
  out.write(len_le, 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()),
            static_cast<std::streamsize>(data.size() * sizeof(float)));
  out.close();
  if (!out) return absl::InternalError("write failed: " + path);
  return absl::OkStatus();
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(absl::StrCat(path, ": malformed .npy (", std::string(why), ")"));
  };
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kNpyMagic, 6) != 0) return bad("magic");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_len = 0;
  size_t offset = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(bytes[8]) |
                 (static_cast<size_t>(static_cast<unsigned char>(bytes[9])) << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header length");
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
    }
    offset = 12;
  } else {
    return absl::UnimplementedError(absl::StrCat(path, ": npy format version ", major));
  }
  if (bytes.size() < offset + header_len) return bad("truncated header");
  const std::string header = bytes.substr(offset, header_len);
  std::string descr, fortran, shape_text;
  if (!FindField(header, "descr", &descr) || !FindField(header, "fortran_order", &fortran) ||
      !FindField(header, "shape", &shape_text)) {
    return bad("header dict");
  }
  if (descr != "'<f4'") {
    return absl::UnimplementedError(absl::StrCat(path, ": dtype ", descr, ", want '<f4'"));
  }
  if (fortran != "False") return absl::UnimplementedError(path + ": Fortran order");
  if (shape_text.size() < 2 || shape_text.front() != '(' || shape_text.back() != ')') {
    return bad("shape");
  }
  NpyArray arr;
  int64_t count = 1;
  std::string inner = shape_text.substr(1, shape_text.size() - 2);
  size_t p = 0;
  while (p < inner.size()) {
    while (p < inner.size() && (inner[p] == ' ' || inner[p] == ',')) ++p;
    if (p >= inner.size()) break;
    size_t e = p;
    while (e < inner.size() && inner[e] >= '0' && inner[e] <= '9') ++e;
    if (e == p || e - p > 15) return bad("shape entry");
    const int64_t dim = std::stoll(inner.substr(p, e - p));
    arr.shape.push_back(dim);
    count *= dim;
    p = e;
  }
  const size_t data_at = offset + header_len;
  if (bytes.size() - data_at != static_cast<size_t>(count) * sizeof(float)) {
    return bad(absl::StrCat("data is ", bytes.size() - data_at, " bytes, shape needs ",
                            count * 4));
  }
  arr.data.resize(count);
  std::memcpy(arr.data.data(), bytes.data() + data_at, count * sizeof(float));
  return arr;
}

std::string ActivationPath(const std::string& dir, int layer, char which) {
  return absl::StrCat(dir, "/layer_", layer, "_", std::string(1, which), ".npy");
}

absl::Status WriteLayerActivations(const std::string& dir, int layer,
                                   const LayerActivations& a) {
  const int64_t t = a.tokens;
  const int64_t d = a.head_dim;
  if (t <= 0 || d <= 0 || a.kv_heads <= 0 || a.q_heads <= 0 || a.q_heads % a.kv_heads != 0) {
    return absl::InvalidArgumentError("bad activation shape");
  }
  const int64_t qs[3] = {t, a.q_heads, d};
  const int64_t ks[3] = {t, a.kv_heads, d};
  OSCARKV_RETURN_IF_ERROR(WriteNpy(ActivationPath(dir, layer, 'q'), qs, a.q));
  OSCARKV_RETURN_IF_ERROR(WriteNpy(ActivationPath(dir, layer, 'k'), ks, a.k));
  return WriteNpy(ActivationPath(dir, layer, 'v'), ks, a.v);
}

absl::StatusOr<LayerActivations> ReadLayerActivations(const std::string& dir, int layer) {
  OSCARKV_ASSIGN_OR_RETURN(NpyArray q, ReadNpy(ActivationPath(dir, layer, 'q')));
  OSCARKV_ASSIGN_OR_RETURN(NpyArray k, ReadNpy(ActivationPath(dir, layer, 'k')));
  OSCARKV_ASSIGN_OR_RETURN(NpyArray v, ReadNpy(ActivationPath(dir, layer, 'v')));
  if (q.shape.size() != 3 || k.shape != v.shape || k.shape.size() != 3 ||
      q.shape[0] != k.shape[0] || q.shape[2] != k.shape[2] || k.shape[1] <= 0 ||
      q.shape[1] % k.shape[1] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer, " activations in ", dir,
                     " do not have shapes q [T, H_q, D], k = v [T, H_kv, D]"));
  }
  LayerActivations a;
  a.tokens = static_cast<int>(q.shape[0]);
  a.q_heads = static_cast<int>(q.shape[1]);
  a.kv_heads = static_cast<int>(k.shape[1]);
  a.head_dim = static_cast<int>(q.shape[2]);
  a.q = std::move(q.data);
  a.k = std::move(k.data);
  a.v = std::move(v.data);
  return a;
}

int CountDumpedLayers(const std::string& dir) {
  int n = 0;
  while (std::filesystem::exists(ActivationPath(dir, n, 'q'))) ++n;
  return n;
}

}  // namespace oscarkv::quant
