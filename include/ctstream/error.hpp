// ctstream — the one error type thrown by the public C++ API.
#pragma once
#include <stdexcept>
#include <string>
#include <string_view>

namespace ctstream {

/// What went wrong, coarse enough to branch on; the message carries the details.
enum class ErrorKind {
  io,                ///< the OS refused an open/stat/read/write
  truncated,         ///< a file is shorter than its header says (or shrank after open)
  header_too_large,  ///< header length over the limit or beyond the file end
  invalid_header,    ///< header/index/config JSON malformed or of the wrong shape
  unknown_dtype,     ///< a dtype string this build does not know
  invalid_offsets,   ///< data_offsets overlap, leave gaps or point past the data region
  overflow,          ///< a shape product or byte count overflows 64 bits
  size_mismatch,     ///< stored byte count disagrees with dtype x shape
  invalid_shard,     ///< a shard name escapes the checkpoint directory
  missing_shard,     ///< an index names a shard file that does not exist
  not_found,         ///< no tensor of that name
  buffer_too_small,  ///< the caller's output span is smaller than the decoded tensor
  unsupported,       ///< a valid request this build cannot serve (conversion, format)
  invalid_argument,  ///< a caller argument is out of range (slice bounds, dtype)
  invalid_config,    ///< config.json quantization/sparsity settings are malformed
  corrupt_tensor,    ///< a compressed tensor's parts contradict each other or the config
  out_of_memory,     ///< an allocation failed (the request itself was valid)
  internal,          ///< anything else: a bug in ctstream (please report it)
  file_not_found,    ///< the path to open does not exist, or holds no checkpoint (no *.safetensors, no index)
};

/// Stable lower-case name of a kind (e.g. "invalid_offsets").
std::string_view error_kind_name(ErrorKind kind) noexcept;

/// The single exception type of ctstream: no other exception leaves the public C++ API (an
/// allocation failure is Error{out_of_memory}; anything unexpected Error{internal}). what() reads
/// "<file>: tensor '<tensor>': <message>" with the parts that are known.
class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string file, std::string tensor, const std::string& message);

  ErrorKind kind() const noexcept { return kind_; }
  /// The file the fault is in (may be empty when no file is involved).
  const std::string& file() const noexcept { return file_; }
  /// The tensor the fault concerns (may be empty).
  const std::string& tensor() const noexcept { return tensor_; }

 private:
  ErrorKind kind_;
  std::string file_;
  std::string tensor_;
};

}  // namespace ctstream
