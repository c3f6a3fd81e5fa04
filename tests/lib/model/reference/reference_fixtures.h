// Helpers shared by the reference tests: reading the committed fixtures in tests/fixtures/model
// and the real text in data/text exactly as tools/reference/common.py does.
// Tests run with the repository root as working directory (oscarkv_cc_test).
#ifndef OSCARKV_TESTS_LIB_MODEL_REFERENCE_REFERENCE_FIXTURES_H_
#define OSCARKV_TESTS_LIB_MODEL_REFERENCE_REFERENCE_FIXTURES_H_

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace oscarkv::model::reference_test {

inline constexpr char kFixtureDir[] = "tests/fixtures/model/";
inline constexpr char kTextDir[] = "data/text/";

// Whole file as bytes; empty string and *ok=false when it cannot be read.
inline std::string ReadFile(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *ok = false;
    return {};
  }
  std::ostringstream ss;
  ss << in.rdbuf();
  *ok = true;
  return ss.str();
}

// Parses a fixture JSON file; *ok=false when missing or malformed.
inline nlohmann::json ReadFixture(const std::string& name, bool* ok) {
  std::string bytes = ReadFile(std::string(kFixtureDir) + name, ok);
  if (!*ok) return {};
  nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  *ok = !j.is_discarded();
  return j;
}

// Lines of a text file by common.read_lines' rule: split on '\n', drop one trailing '\r' per
// piece, drop a final empty piece.
inline std::vector<std::string> SplitLines(const std::string& data) {
  std::vector<std::string> pieces;
  size_t start = 0;
  for (;;) {
    size_t nl = data.find('\n', start);
    if (nl == std::string::npos) {
      pieces.push_back(data.substr(start));
      break;
    }
    pieces.push_back(data.substr(start, nl - start));
    start = nl + 1;
  }
  if (!pieces.empty() && pieces.back().empty()) pieces.pop_back();
  for (std::string& p : pieces) {
    if (!p.empty() && p.back() == '\r') p.pop_back();
  }
  return pieces;
}

// Lines [first, first + count) joined with '\n'.
inline std::string JoinSpan(const std::vector<std::string>& lines, size_t first, size_t count) {
  std::string out;
  for (size_t i = first; i < first + count && i < lines.size(); ++i) {
    if (i > first) out.push_back('\n');
    out += lines[i];
  }
  return out;
}

// FNV-1a 64-bit as 16 lowercase hex digits (common.fnv1a64).
inline std::string Fnv1a64Hex(const std::string& data) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : data) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

inline std::string IdsToString(const std::vector<int32_t>& ids, size_t max_items = 48) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size() && i < max_items; ++i) {
    if (i) s += ",";
    s += std::to_string(ids[i]);
  }
  if (ids.size() > max_items) s += ",...";
  return s + "]";
}

}  // namespace oscarkv::model::reference_test

#endif  // OSCARKV_TESTS_LIB_MODEL_REFERENCE_REFERENCE_FIXTURES_H_
