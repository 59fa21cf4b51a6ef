// ctstream — writes a plain safetensors file tensor by tensor. Data goes to a temporary file
// beside the target (created exclusively under an unpredictable name: a file or link planted
// there makes creation fail rather than being followed) that commit() fsyncs and renames into
// place: an error, an exception or a crash never leaves a partial file under the final name, and
// without commit() the temporary file is removed.
//
// What every writer refuses (SafetensorsWriter, decompress_to_file, compress_checkpoint /
// compress, write_report_json): an output path that holds, after following a link, anything but
// a regular file (a directory for compress): a device, a FIFO, a socket (renaming a finished
// file onto /dev/null would replace it); an output absent at the start that appeared during the
// run (it is left as it is, nothing is written); an existing output replaced by another file
// during the run. An existing regular file (or a link, never its target) is replaced at commit().
//
// Write limits: a full disk (ENOSPC) or a file-size limit is an Error{io} naming the output, with
// the temporary file removed. The file-size limit (RLIMIT_FSIZE) reaches a process as SIGXFSZ,
// whose default action kills it mid-write, before any cleanup; the library does not change signal
// dispositions behind its caller's back, so a program that wants EFBIG reported as an error
// ignores SIGXFSZ itself (the ctstream CLI does; CPython does at startup).
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
class OutputFile;
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

  /// Bytes tensor `i` (in declaration order) must receive; Error{invalid_argument} past the last.
  uint64_t tensor_bytes(size_t i) const;
  /// Appends bytes of the current tensor(s); tensors are filled in order.
  void write(std::span<const std::byte> data);
  /// Checks every tensor got exactly its bytes, flushes, fsyncs and renames into place.
  void commit();

 private:
  std::filesystem::path out_;
  std::unique_ptr<io::OutputFile> tmp_;  // null once committed
  std::vector<uint64_t> sizes_;
  uint64_t written_ = 0, expected_ = 0;
};

/// Removes every temporary file that a writer of this process (SafetensorsWriter,
/// compress_checkpoint, decompress_to_file) has open. Async-signal-safe: for a signal handler
/// that must end the process at once (a writer removes its own temporary files on error, on
/// cancel and on destruction).
void remove_temporary_outputs() noexcept;

}  // namespace ctstream
