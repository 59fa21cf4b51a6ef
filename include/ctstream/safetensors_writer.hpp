// ctstream — writes a plain safetensors file tensor by tensor. Data goes to a temporary file
// beside the target that commit() fsyncs and renames into place: an error, an exception or a
// crash never leaves a partial file under the final name.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "ctstream/dtype.hpp"
#include "ctstream/tensor.hpp"

namespace ctstream {

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
  std::filesystem::path out_, tmp_;
  std::vector<uint64_t> sizes_;
  std::FILE* f_ = nullptr;
  uint64_t written_ = 0, expected_ = 0;
  bool committed_ = false;
};

}  // namespace ctstream
