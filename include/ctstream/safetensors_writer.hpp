// ctstream — writes a plain safetensors file tensor by tensor. Data goes to a temporary file
// beside the target (created exclusively under an unpredictable name: a file or link planted
// there makes creation fail rather than being followed) that commit() fsyncs and renames into
// place: an error, an exception or a crash never leaves a partial file under the final name, and
// without commit() the temporary file is removed.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ctstream/dtype.hpp"
#include "ctstream/tensor.hpp"

namespace ctstream {
namespace io {
class TempFile;
}

class SafetensorsWriter {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
  };
  /// Declares every tensor up front (the header goes first); data then streams in, in
  /// declaration order. Throws Error{io} when the temporary file cannot be created.
  SafetensorsWriter(std::filesystem::path out, std::vector<Entry> entries,
                    std::map<std::string, std::string> metadata = {});
  ~SafetensorsWriter();  ///< without commit(): removes the temporary file
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  /// Bytes tensor `i` must receive.
  uint64_t tensor_bytes(size_t i) const { return sizes_.at(i); }
  /// Appends bytes of the current tensor(s); tensors are filled in order.
  void write(std::span<const std::byte> data);
  /// Checks every tensor got exactly its bytes, flushes, fsyncs and renames into place.
  void commit();

 private:
  std::filesystem::path out_;
  std::unique_ptr<io::TempFile> tmp_;  // null once committed
  std::vector<uint64_t> sizes_;
  uint64_t written_ = 0, expected_ = 0;
};

/// Removes every temporary file that a writer of this process (SafetensorsWriter,
/// compress_checkpoint, decompress_to_file) has open. Async-signal-safe: for a signal handler
/// that must end the process at once (a writer removes its own temporary files on error, on
/// cancel and on destruction).
void remove_temporary_outputs() noexcept;

}  // namespace ctstream
