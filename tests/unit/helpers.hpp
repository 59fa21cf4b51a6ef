// Test helpers: fixture paths, hex decoding, temp dirs, deterministic random bytes.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <optional>

#include "ctstream/error.hpp"

namespace th {

/// The kind of the ctstream::Error `f` throws; nullopt when it returns normally.
template <class F>
std::optional<ctstream::ErrorKind> error_kind(F&& f) {
  try {
    f();
  } catch (const ctstream::Error& e) {
    return e.kind();
  }
  return std::nullopt;
}

/// tests/fixtures and the source tree of this build (tests/unit/paths.cpp: the one unit compiled
/// with the clone's absolute paths, so a fresh clone elsewhere recompiles only it).
std::filesystem::path fixtures();
std::filesystem::path source_dir();

inline std::vector<std::byte> from_hex(const std::string& h) {
  std::vector<std::byte> out(h.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return out;
}

inline nlohmann::json read_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  return nlohmann::json::parse(f);
}

/// A fresh empty directory under the system temp dir, removed at scope exit.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag) {
    static std::mt19937_64 rng{std::random_device{}()};
    path = std::filesystem::temp_directory_path() / ("ctstream-test-" + tag + "-" + std::to_string(rng()));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline std::vector<std::byte> random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  return v;
}

inline void write_file(const std::filesystem::path& p, const std::vector<std::byte>& data) {
  std::ofstream f(p, std::ios::binary);
  f.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

}  // namespace th
