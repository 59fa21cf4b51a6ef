#include "ctstream/safetensors_writer.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/checked.hpp"
#include "ctstream/error.hpp"
#include "format/safetensors.hpp"

namespace ctstream {

SafetensorsWriter::SafetensorsWriter(std::filesystem::path out, std::vector<Entry> entries,
                                     std::map<std::string, std::string> metadata)
    : out_(std::move(out)) {
  std::vector<format::StEntry> st;
  st.reserve(entries.size());
  uint64_t off = 0;
  for (auto& e : entries) {
    auto numel = detail::checked_numel(e.shape);
    auto bits = numel ? detail::checked_mul(*numel, dtype_bits(e.dtype)) : std::nullopt;
    if (!bits || *bits % 8)
      throw Error(ErrorKind::overflow, out_.string(), e.name, "tensor size is not a whole number of bytes");
    st.push_back({std::move(e.name), e.dtype, std::move(e.shape), off, off + *bits / 8});
    sizes_.push_back(*bits / 8);
    off += *bits / 8;
  }
  expected_ = off;
  const std::string header = format::serialize_header(st, metadata);
  tmp_ = out_;
  tmp_ += ".tmp." + std::to_string(::getpid());
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw Error(ErrorKind::io, tmp_.string(), "", std::string("cannot create: ") + std::strerror(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  if (std::fwrite(len, 1, 8, f_) != 8 || std::fwrite(header.data(), 1, header.size(), f_) != header.size())
    throw Error(ErrorKind::io, tmp_.string(), "", std::string("write failed: ") + std::strerror(errno));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (f_) std::fclose(f_);
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove(tmp_, ec);
  }
}

void SafetensorsWriter::write(std::span<const std::byte> data) {
  if (written_ + data.size() > expected_)
    throw Error(ErrorKind::invalid_argument, out_.string(), "", "more tensor bytes written than declared");
  if (!data.empty() && std::fwrite(data.data(), 1, data.size(), f_) != data.size())
    throw Error(ErrorKind::io, tmp_.string(), "", std::string("write failed: ") + std::strerror(errno));
  written_ += data.size();
}

void SafetensorsWriter::commit() {
  if (written_ != expected_)
    throw Error(ErrorKind::invalid_argument, out_.string(), "",
                "wrote " + std::to_string(written_) + " of " + std::to_string(expected_) + " declared bytes");
  if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0)
    throw Error(ErrorKind::io, tmp_.string(), "", std::string("flush failed: ") + std::strerror(errno));
  std::FILE* f = f_;
  f_ = nullptr;
  if (std::fclose(f) != 0) throw Error(ErrorKind::io, tmp_.string(), "", std::string("close failed: ") + std::strerror(errno));
  std::error_code ec;
  std::filesystem::rename(tmp_, out_, ec);
  if (ec) throw Error(ErrorKind::io, out_.string(), "", "cannot rename temporary file into place: " + ec.message());
  committed_ = true;
}

}  // namespace ctstream
