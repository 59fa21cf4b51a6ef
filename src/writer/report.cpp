#include "writer/report.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/boundary.hpp"
#include "core/paths.hpp"
#include "io/file.hpp"
#include "io/output.hpp"
#include "io/url.hpp"
#include "writer/plan.hpp"

namespace ctstream {
namespace writer {

void ErrStats::add(float ref, float dec) {
  if (std::isnan(ref) && std::isnan(dec)) return;
  const double e = static_cast<double>(dec) - static_cast<double>(ref);
  if (e != 0 || std::isnan(e)) exact = false;
  if (std::isnan(e)) {
    max_abs = std::numeric_limits<double>::infinity();
    return;
  }
  max_abs = std::max(max_abs, std::fabs(e));
  sum_x2 += static_cast<double>(ref) * ref;
  sum_e2 += e * e;
}

void ErrStats::fill(TensorReport& tr, uint64_t n) const {
  tr.exact = exact;
  tr.max_abs_error = max_abs;
  tr.rms_error = n ? std::sqrt(sum_e2 / static_cast<double>(n)) : 0;
  tr.snr_db = exact || sum_e2 == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(sum_x2 / sum_e2);
}

}  // namespace writer

namespace {
using json = nlohmann::json;
json num_or_null(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }
}  // namespace

std::string describe_scheme(const CompressOptions& options) { return writer::resolve(options).scheme; }

std::string report_json(const CompressReport& r, const CompressOptions& o) {
  json tensors = json::array();
  for (const auto& t : r.tensors)
    tensors.push_back(
        {{"name", t.name},
         {"format", std::string(format_name(t.format))},
         {"scheme", t.scheme},
         {"input_dtype", std::string(dtype_name(t.input_dtype))},
         {"output_dtype", std::string(dtype_name(t.output_dtype))},
         {"shape", t.shape},
         {"input_bytes", t.input_bytes},
         {"output_bytes", t.output_bytes},
         {"exact", t.exact},
         {"max_abs_error", t.max_abs_error},
         {"rms_error", t.rms_error},
         {"snr_db", num_or_null(t.snr_db)},
         {"ratio", t.output_bytes ? static_cast<double>(t.input_bytes) / static_cast<double>(t.output_bytes) : 0.0},
         {"pruned_groups", t.pruned},
         {"rank", t.rank}});
  json j = {{"format", std::string(format_name(o.format))},
            {"scheme", describe_scheme(o)},
            {"input_bytes", r.input_bytes},
            {"output_bytes", r.output_bytes},
            {"ratio", r.ratio()},
            {"seconds", r.seconds},
            {"format_counts", r.format_counts},
            {"files", r.files},
            {"copied", r.copied},
            {"skipped", r.skipped},
            {"tensors", tensors}};
  return j.dump(2, ' ', false, json::error_handler_t::replace) + "\n";
}

namespace {
namespace fs = std::filesystem;
// Absolute, with the existing part of the path resolved (links followed), lexically normal.
fs::path resolved(const fs::path& p) {
  std::error_code ec;
  fs::path r = fs::weakly_canonical(fs::absolute(p, ec), ec);
  return (ec ? fs::absolute(p) : r).lexically_normal();
}
// The regular files of a local input: a directory's own files, or a file and those beside it
// (config.json and the like are read from there); none for a remote one or none at all.
std::vector<io::FileIdentity> input_identities(const fs::path& input) {
  std::vector<io::FileIdentity> ids;
  if (input.empty() || io::is_remote_url(input.string())) return ids;
  std::error_code ec;
  const fs::path in = resolved(input);
  const fs::path dir = fs::is_directory(in, ec) ? in : in.parent_path();
  for (const auto& e : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
    io::FileIdentity id;
    if (e.is_regular_file(ec) && io::identify(e.path(), id)) ids.push_back(std::move(id));
  }
  return ids;
}
// check_report_path with the input's identities already collected.
void check_report(const fs::path& path, const fs::path& input, std::span<const io::FileIdentity> inputs,
                  const fs::path& output_dir, bool overwrite) {
  const fs::path at = resolved(path);
  // io::check_output's rules first (a device, FIFO or socket, or one of the input's files under
  // another name, a link or hard link, each with its own message).
  (void)io::check_output(path, io::OutputKind::file, false, inputs);
  if (!input.empty() && !io::is_remote_url(input.string()) && detail::path_within(at, resolved(input)))
    throw Error(ErrorKind::invalid_argument, path.string(), "",
                "the report would be written into the input checkpoint " + input.string());
  if (!output_dir.empty() && detail::path_within(at, resolved(output_dir)))
    throw Error(ErrorKind::invalid_argument, path.string(), "",
                "the report would be written into the output checkpoint " + output_dir.string() +
                    ", which holds the checkpoint's files only");
  // where it goes must take a new file now, not after the work is done
  const fs::path parent = at.parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec) || ::access(parent.c_str(), W_OK) != 0)
    throw Error(ErrorKind::io, path.string(), "", "the report's directory " + parent.string() + " is not writable");
  if (!overwrite && fs::symlink_status(path, ec).type() != fs::file_type::not_found && !ec)
    throw Error(ErrorKind::invalid_argument, path.string(), "",
                "the report file already exists (overwrite / --overwrite replaces it)");
}
}  // namespace

void check_report_path(const std::filesystem::path& path, const std::filesystem::path& input,
                       const std::filesystem::path& output_dir, bool overwrite) {
  check_report(path, input, input_identities(input), output_dir, overwrite);
}

void write_report_json(const std::filesystem::path& path, const CompressReport& report, const CompressOptions& options,
                       const std::filesystem::path& input, const std::filesystem::path& output_dir) {
  detail::at_boundary(path.string(), "", [&] {
    const auto ids = input_identities(input);
    check_report(path, input, ids, output_dir, options.overwrite);
    const std::string text = report_json(report, options);
    io::OutputFile f(path, ids);
    if (std::fwrite(text.data(), 1, text.size(), f.stream()) != text.size())
      throw Error(ErrorKind::io, path.string(), "", std::string("write failed: ") + std::strerror(errno));
    f.commit();
  });
}

}  // namespace ctstream
