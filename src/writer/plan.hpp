// writer — planning `compress_checkpoint`: which scheme the options resolve to, which tensors are
// compressed (targets / ignore with the "Linear" / "Embedding" name heuristics), and what each
// one becomes on disk - names, dtypes, shapes and order taken from the format table
// (format/format_table.hpp). check_plan() then runs the reader's own open-time validation over
// the planned entries and config: the writer cannot produce a layout the reader refuses.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ctstream/checkpoint.hpp"
#include "ctstream/writer.hpp"
#include "format/format_table.hpp"
#include "format/low_rank.hpp"
#include "format/targets.hpp"
#include "writer/quantize.hpp"

namespace ctstream::writer {

bool is_quantized_format(Format f);
bool is_sparse_format(Format f);

/// The options, resolved to one scheme for every compressed tensor.
struct Resolved {
  Format format = Format::dense;
  QuantArgs args;            ///< quantized formats (the scheme the config declares)
  uint64_t rank = 0;         ///< low-rank
  double energy = 0;         ///< low-rank
  bool activations = false;  ///< int/float: dynamic input activations declared
  std::string scheme;        ///< human-readable, "int4 group128 sym"
};
/// Throws Error{invalid_argument / unsupported} for an inconsistent combination.
Resolved resolve(const CompressOptions& o);

/// --targets / --ignore: the library's grammar (format/targets.hpp). A class name matches the
/// modules whose class (or a base) has that name when the model's classes are known
/// (TensorSource::module_classes); without them "Linear" and "Embedding" are matched by name
/// heuristics and other class names are refused. "Linear" never matches the output head
/// (lm_head / embed_out), which stays dense unless named explicitly.
class Selector {
 public:
  using Classes = std::map<std::string, std::vector<std::string>>;
  Selector(const std::vector<std::string>& entries, const char* what, const Classes& classes);
  bool matches(const std::string& module, const TensorInfo& t) const;

 private:
  format::TargetList list_;
  const Classes& classes_;
};

struct OutEntry {
  std::string key;
  DType dtype;
  Shape shape;
  uint64_t bytes = 0;
  format::Role role = format::Role::weight;  ///< compressed tensors: which part
};

/// One input tensor and what it becomes.
struct Item {
  const TensorInfo* t = nullptr;
  size_t index = 0;  ///< in the source
  bool compress = false;
  DType work = DType::F32;  ///< dtype the tensor is written / quantized in
  bool convert = false;     ///< float values are rounded from t->dtype to `work`
  std::string module;       ///< compressed: the module prefix (name without ".weight")
  std::vector<OutEntry> out;
  uint64_t nnz = 0;          ///< sparse-bitmask (scan)
  float tmin = 0, tmax = 0;  ///< nvfp4 (scan)
  float global_scale = 1.f;  ///< nvfp4
  uint64_t rank = 0;         ///< low-rank: the rank kept (energy: set by the scan)
  std::string conv_attrs;    ///< low-rank of a conv weight: its module's attributes (JSON)
  size_t shard = 0;
};

struct Plan {
  std::vector<Item> items;                 ///< input order
  std::vector<std::string> config_ignore;  ///< the user's ignore list + every uncompressed module
  uint64_t input_bytes = 0;
};

/// Decides per tensor. `origin(i)` names where tensor i comes from in errors.
/// `convs`: TensorSource::conv_modules (low-rank decomposes the 4-D weights of these).
Plan make_plan(std::span<const TensorInfo> tensors, const CompressOptions& o, const Resolved& r,
               const Selector::Classes& classes, const std::map<std::string, std::string>& convs,
               const std::function<std::string(size_t)>& origin);

/// Low-rank: the decomposed modules the plan describes (decompose_config.json's content).
std::vector<format::LowRankModule> low_rank_modules(const Plan& plan);

/// Fills `it.out` of a compressed item (after the scan: sparse-bitmask needs its nnz).
void plan_parts(Item& it, const Resolved& r);

/// The reader's open-time validation (format/grouping.cpp) over the planned entries and the
/// config text about to be written: every compressed item must come back as one tensor of the
/// requested format with its input shape. Throws Error{internal} naming the tensor otherwise.
void check_plan(const Plan& plan, const Resolved& r, const std::string& config_text);

}  // namespace ctstream::writer
