#include "ctstream/safetensors_writer.hpp"

#include <cerrno>
#include <cstring>
#include <set>

#include "core/boundary.hpp"
#include "core/checked.hpp"
#include "ctstream/error.hpp"
#include "format/safetensors.hpp"
#include "io/output.hpp"

namespace ctstream {

SafetensorsWriter::SafetensorsWriter(std::filesystem::path out, std::vector<Entry> entries,
                                     std::map<std::string, std::string> metadata)
    : out_(std::move(out)) {
  detail::at_boundary(out_.string(), "", [&] {
    std::vector<format::StEntry> st;
    st.reserve(entries.size());
    uint64_t off = 0;
    std::set<std::string> names;
    for (auto& e : entries) {
      if (!names.insert(e.name).second)
        throw Error(ErrorKind::invalid_argument, out_.string(), e.name,
                    "tensor name appears twice (a safetensors header holds one tensor per name)");
      if (e.name == "__metadata__")  // the header's reserved key: the file would open nowhere
        throw Error(ErrorKind::invalid_argument, out_.string(), e.name,
                    "'__metadata__' is the safetensors header's reserved key, not a tensor name");
      auto numel = detail::checked_numel(e.shape);
      auto bits = numel ? detail::checked_mul(*numel, dtype_bits(e.dtype)) : std::nullopt;
      if (!bits || *bits % 8 || !detail::checked_add(off, *bits / 8))
        throw Error(ErrorKind::overflow, out_.string(), e.name,
                    "tensor size is not a whole number of bytes or overflows");
      st.push_back({std::move(e.name), e.dtype, std::move(e.shape), off, off + *bits / 8});
      sizes_.push_back(*bits / 8);
      off += *bits / 8;
    }
    expected_ = off;
    const std::string header = format::serialize_header(st, metadata);
    tmp_ = std::make_unique<io::OutputFile>(out_);  // the output rules: io::check_output
    uint8_t len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
    std::FILE* f = tmp_->stream();
    if (std::fwrite(len, 1, 8, f) != 8 || std::fwrite(header.data(), 1, header.size(), f) != header.size())
      throw Error(ErrorKind::io, out_.string(), "", std::string("write failed: ") + std::strerror(errno));
  });
}

SafetensorsWriter::~SafetensorsWriter() = default;  // an uncommitted temporary file is removed

uint64_t SafetensorsWriter::tensor_bytes(size_t i) const {
  if (i >= sizes_.size())
    throw Error(ErrorKind::invalid_argument, out_.string(), "",
                "tensor " + std::to_string(i) + " asked of a writer declaring " + std::to_string(sizes_.size()));
  return sizes_[i];
}

void SafetensorsWriter::write(std::span<const std::byte> data) {
  detail::at_boundary(out_.string(), "", [&] {
    if (!tmp_) throw Error(ErrorKind::invalid_argument, out_.string(), "", "write after commit");
    if (written_ + data.size() > expected_)
      throw Error(ErrorKind::invalid_argument, out_.string(), "", "more tensor bytes written than declared");
    if (!data.empty() && std::fwrite(data.data(), 1, data.size(), tmp_->stream()) != data.size())
      throw Error(ErrorKind::io, out_.string(), "", std::string("write failed: ") + std::strerror(errno));
    written_ += data.size();
  });
}

void SafetensorsWriter::commit() {
  detail::at_boundary(out_.string(), "", [&] {
    if (!tmp_) throw Error(ErrorKind::invalid_argument, out_.string(), "", "committed twice");
    if (written_ != expected_)
      throw Error(ErrorKind::invalid_argument, out_.string(), "",
                  "wrote " + std::to_string(written_) + " of " + std::to_string(expected_) + " declared bytes");
    tmp_->commit();
    tmp_.reset();
  });
}

void remove_temporary_outputs() noexcept { io::remove_registered_temps(); }

}  // namespace ctstream
