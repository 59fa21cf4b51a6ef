#include "ctstream/error.hpp"

namespace ctstream {

std::string_view error_kind_name(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::io: return "io";
    case ErrorKind::truncated: return "truncated";
    case ErrorKind::header_too_large: return "header_too_large";
    case ErrorKind::invalid_header: return "invalid_header";
    case ErrorKind::unknown_dtype: return "unknown_dtype";
    case ErrorKind::invalid_offsets: return "invalid_offsets";
    case ErrorKind::overflow: return "overflow";
    case ErrorKind::size_mismatch: return "size_mismatch";
    case ErrorKind::invalid_shard: return "invalid_shard";
    case ErrorKind::missing_shard: return "missing_shard";
    case ErrorKind::not_found: return "not_found";
    case ErrorKind::buffer_too_small: return "buffer_too_small";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::invalid_argument: return "invalid_argument";
    case ErrorKind::invalid_config: return "invalid_config";
    case ErrorKind::corrupt_tensor: return "corrupt_tensor";
    case ErrorKind::out_of_memory: return "out_of_memory";
    case ErrorKind::internal: return "internal";
    case ErrorKind::file_not_found: return "file_not_found";
  }
  return "unknown";
}

static std::string compose(const std::string& file, const std::string& tensor, const std::string& message) {
  std::string s;
  if (!file.empty()) s += file + ": ";
  if (!tensor.empty()) s += "tensor '" + tensor + "': ";
  s += message;
  return s;
}

Error::Error(ErrorKind kind, std::string file, std::string tensor, const std::string& message)
    : std::runtime_error(compose(file, tensor, message)),
      kind_(kind),
      file_(std::move(file)),
      tensor_(std::move(tensor)) {}

}  // namespace ctstream
