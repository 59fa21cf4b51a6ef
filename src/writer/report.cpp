#include "writer/report.hpp"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/boundary.hpp"
#include "io/output.hpp"
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

void write_report_json(const std::filesystem::path& path, const CompressReport& report,
                       const CompressOptions& options) {
  detail::at_boundary(path.string(), "", [&] {
    const std::string text = report_json(report, options);
    io::OutputFile f(path);
    if (std::fwrite(text.data(), 1, text.size(), f.stream()) != text.size())
      throw Error(ErrorKind::io, path.string(), "", std::string("write failed: ") + std::strerror(errno));
    f.commit();
  });
}

}  // namespace ctstream
