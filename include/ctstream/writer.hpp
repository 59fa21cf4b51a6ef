// ctstream — writer: turn a dense checkpoint into a compressed-tensors checkpoint that both
// ctstream and the Python library (compressed-tensors) load.
//
//   ctstream::CompressOptions opt;
//   opt.format = ctstream::Format::pack_quantized;     // int4, group 128, symmetric by default
//   opt.ignore = {"re:.*mlp.down_proj"};
//   opt.progress = [](const ctstream::CompressProgress& p) { ... };
//   ctstream::CompressReport r = ctstream::compress_checkpoint("in_dir", "out_dir", opt);
//   std::cout << r.output_bytes << " bytes, ratio " << r.ratio() << "\n";
//
// Formats and the library line whose layout and config are written:
//   pack_quantized        INT 1..8 bits packed into int32, tensor/channel/group/block, sym/asym (0.20)
//   int_quantized         INT 1..8 bits stored unpacked as int8, + dynamic per-token int8
//                         activations unless weight-only (INT8_W8A8 preset, 0.20)
//   float_quantized       FP8 E4M3, tensor/channel/group/block, + dynamic fp8 activations unless
//                         weight-only (FP8_DYNAMIC / FP8_BLOCK presets, 0.20)
//   nvfp4_pack_quantized  FP4 E2M1, group 16, fp8 scales + fp32 global scale (NVFP4A16, 0.20)
//   mxfp4_pack_quantized  FP4 E2M1, group 32, E8M0 (uint8) power-of-two scales (MXFP4A16, 0.20)
//   mxfp8_quantized       FP8 E4M3, group 32, E8M0 (uint8) power-of-two scales (MXFP8A16, 0.20)
//   sparse_bitmask        non-zeros + bitmask, dtype kept (0.12; the 0.20 line has no sparsity)
//   sparse_24_bitmask     2:4 structured sparsity, dtype kept (0.12)
//   dense                 plain copy, float tensors converted to `dtype` (e.g. fp32 -> bf16)
//   low_rank              ptdeco's layout (format/low_rank.hpp): each weight W [out, in] becomes
//                         `m.0.weight` = sqrt(S) V^T [R, in] and `m.1.weight` = U sqrt(S) [out, R]
//                         (truncated SVD, Eigen BDCSVD), `m.bias` becomes `m.1.bias`, and
//                         decompose_config.json says so; `rank` or `energy` picks R. A conv
//                         weight [out, in, kh, kw] (when the source knows its module's attributes,
//                         TensorSource::conv_modules, groups 1) becomes a kh x kw conv to R channels
//                         then a 1 x 1 conv. A weight whose
//                         factors would not be smaller than it stays dense. Quantize the factors by
//                         compressing the result again (e.g. int-quantized): the reader decodes them
//                         with their own codecs before multiplying.
//
// Which tensors are compressed: only 2-D `<module>.weight` tensors matched by `targets` and not
// by `ignore`. The default target "Linear" means "Linear-like": every 2-D float `.weight` except
// embeddings (module names containing "embed", "wte", "wpe") and the output head (`lm_head`,
// `embed_out`). Explicit names and `re:` patterns (Python re.match semantics: anchored at the
// start) select exactly what they match. Everything else (norms, biases, embeddings, buffers) is
// copied as stored (float tensors converted when `dtype` is set).
//
// Numerics: scales / zero points are the library's (llm-compressor min-max observer +
// compressed-tensors 0.20 calculate_qparams) and codes its round-to-nearest quantization,
// reproduced bit for bit in the weight's dtype; see src/writer/quantize.hpp.
//
// Streaming and safety: tensors are read, compressed and written one at a time (peak memory is a
// few times the largest tensor, not the model). Everything is written into a hidden temporary
// directory beside `out_dir` and renamed into place only when complete: an error, a cancel or a
// crash never leaves a partial checkpoint under `out_dir`.
#pragma once
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ctstream/checkpoint.hpp"
#include "ctstream/dtype.hpp"
#include "ctstream/tensor.hpp"

namespace ctstream {

/// Progress of compress_checkpoint, reported after each tensor.
struct CompressProgress {
  enum class Phase : uint8_t {
    scan,   ///< pre-pass (sparse-bitmask non-zero counts, nvfp4 global scales)
    write,  ///< compressing + writing
  } phase = Phase::write;
  size_t tensors_done = 0, tensors_total = 0;
  uint64_t bytes_done = 0, bytes_total = 0;  ///< input bytes (as stored) of the phase
  std::string tensor;                        ///< name of the tensor just finished
  double elapsed_s = 0;                      ///< since compress_checkpoint started
};

struct CompressOptions {
  /// Output format (see the table above); any other Format throws Error{unsupported}.
  Format format = Format::pack_quantized;

  // ---- weight quantization (quantized formats) ----
  /// Bits per weight: 0 = the format's default (pack 4, int 8, float 8, nvfp4 4, mxfp4 4, mxfp8 8).
  unsigned num_bits = 0;
  /// nullopt = the format's default: pack-quantized group, int/float-quantized channel,
  /// nvfp4 tensor_group, mxfp4 / mxfp8 group.
  std::optional<QuantStrategy> strategy;
  bool symmetric = true;  ///< false: asymmetric (INT formats only)
  /// Group strategy: nullopt = 128 (mxfp4 / mxfp8: 32, the only size their E8M0 scales take).
  /// Set with another strategy, or another size for MX, it is an error rather than ignored.
  std::optional<uint64_t> group_size;
  /// Block strategy: nullopt = 128 x 128. Set with another strategy, it is an error.
  std::optional<uint64_t> block_rows, block_cols;
  /// int/float-quantized: also declare dynamic per-token (block: per-group-128) input activation
  /// quantization, as the INT8_W8A8 / FP8_DYNAMIC / FP8_BLOCK presets do. false = weight-only
  /// (the library then calls the format naive-quantized; same tensors).
  bool input_activations = true;
  /// nvfp4: one global scale shared by q/k/v and by gate/up projections of the same parent
  /// module (llm-compressor's `fuse_weight_observers`, which vLLM's fused layers need).
  bool fuse_global_scales = true;

  // ---- sparsity ----
  /// sparse-24-bitmask: a tensor that is not already 2:4 sparse is an error unless this is set;
  /// then the 2 largest |x| of every 4 are kept (what the library's compressor does).
  bool prune_24 = false;

  // ---- low-rank ----
  /// low_rank: singular values kept per weight (a weight whose rank-`rank` factors would hold as
  /// many values as it does stays dense). Exactly one of rank / energy is set.
  uint64_t rank = 0;
  /// low_rank: keep the smallest rank whose singular values hold this fraction (0, 1] of the
  /// weight's energy sum(s^2), capped so that the factors hold fewer values than the weight.
  double energy = 0;

  // ---- selection ----
  /// Targets: module names, "re:" patterns or "Linear" (see above). Empty = {"Linear"}.
  std::vector<std::string> targets;
  /// Modules never compressed (names or "re:" patterns); they are also written to the config.
  std::vector<std::string> ignore;

  // ---- output ----
  /// Convert every F32/F16/BF16 tensor to this dtype first (dense: the downcast itself; quantized
  /// formats then quantize in this dtype, like the library after `model.to(dtype)`).
  std::optional<DType> dtype;
  /// Largest shard; the output is one `model.safetensors` when everything fits, else
  /// `model-0000i-of-0000N.safetensors` + `model.safetensors.index.json`.
  uint64_t shard_bytes = 5'000'000'000ull;
  /// Replace an existing non-empty `out_dir` (it is swapped out only after success). Without it,
  /// `out_dir` must be absent or empty at the start and again at the final rename: one created or
  /// filled during the run (by the user, or a second compress to the same path) is left as it is
  /// and the call fails with Error{io}. Either way, `out_dir` must not be (a link to) anything but
  /// a directory. See ctstream/safetensors_writer.hpp for what every writer refuses.
  bool overwrite = false;
  /// Copy the input directory's other files (tokenizer, generation config, sub-folders, ...).
  /// Other weight files (*.bin, *.pt, *.pth, *.ckpt, *.h5, *.msgpack, *.onnx, *.gguf) are skipped.
  bool copy_other_files = true;
  /// Decode every compressed tensor back (as the library decompresses it) and measure the error.
  bool compute_errors = true;
  OpenOptions open;  ///< how the input is read
  /// Called after each tensor (on the calling thread). May throw to abort.
  std::function<void(const CompressProgress&)> progress;
  /// Polled between tensors; when it becomes true the call throws Error{io, "cancelled"} and
  /// removes everything it wrote.
  const std::atomic<bool>* cancel = nullptr;

  /// The rules a user-facing surface (the CLI's `compress`, Python's compress / save_*) applies
  /// to options a user typed, written once: format dense needs a `dtype` (without one the
  /// library call is a plain copy); `shard_bytes` is positive; `rank` / `energy` belong to format
  /// low-rank. Throws Error{invalid_argument} naming the rule. The rules every call applies (a
  /// float `dtype`, bits / strategy / group size for the format, energy in (0, 1]) are
  /// describe_scheme()'s, which compress() checks too.
  void validate() const;
};

/// What happened to one input tensor.
struct TensorReport {
  std::string name;                                           ///< input (logical) name
  Format format = Format::dense;                              ///< dense = copied (or converted)
  std::string scheme;                                         ///< "int4 group128 sym", "2:4", "" for dense
  DType input_dtype = DType::F32, output_dtype = DType::F32;  ///< output: what the library decodes to
  Shape shape;
  uint64_t input_bytes = 0, output_bytes = 0;  ///< stored bytes (all parts for the output)
  bool exact = true;                           ///< decodes to exactly the input values
  double max_abs_error = 0;                    ///< max |decoded - input| (0 when exact / not computed)
  double snr_db = 0;                           ///< 10 log10(sum x^2 / sum e^2); +inf when exact
  double rms_error = 0;
  uint64_t pruned = 0;  ///< sparse-24: groups of 4 in which non-zeros were dropped
  uint64_t rank = 0;    ///< low-rank: the rank kept
};

struct CompressReport {
  std::vector<TensorReport> tensors;
  std::map<std::string, size_t> format_counts;  ///< format name -> number of tensors
  uint64_t input_bytes = 0, output_bytes = 0;   ///< tensor bytes (headers excluded)
  std::vector<std::string> files;               ///< files written, relative to out_dir
  std::vector<std::string> copied, skipped;     ///< other input files copied / left out
  double seconds = 0;
  double ratio() const {
    return output_bytes ? static_cast<double>(input_bytes) / static_cast<double>(output_bytes) : 0.0;
  }
};

/// The writer's input, read one tensor at a time: a checkpoint on disk (compress_checkpoint) or
/// tensors in memory (BufferSource: Python's save_model / save_file feed a state dict through it).
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  /// The tensors to write, in output order: logical name, natural dtype, shape (and, for a
  /// checkpoint, its stored parts). Stable for the life of the source.
  virtual std::span<const TensorInfo> tensors() const = 0;
  /// Writes rows [r0, r1) along dim 0 of tensor `i` (the whole tensor when it is 0-d) into `out`,
  /// which holds exactly those rows as `dtype`: the tensor's own dtype, or F32 / F16 / BF16 for a
  /// floating tensor. Throws ctstream::Error naming the tensor when its data is bad.
  virtual void read(size_t i, uint64_t r0, uint64_t r1, std::span<std::byte> out, DType dtype) = 0;
  /// Where tensor `i` comes from, for error messages (a file path, "memory").
  virtual std::string origin(size_t i) const = 0;
  /// The model's config.json text ("" = none): the compression section is merged into it.
  virtual std::string config_json() const { return {}; }
  /// Where config_json() comes from, for error messages.
  virtual std::string config_origin() const { return "config.json"; }
  /// Module name -> the class names of its type and its bases (Python's `type(m).__mro__`),
  /// when the model is known. Targets / ignore entries naming a class then match modules of that
  /// class, as compressed-tensors matches them (utils/match.py `_match_class`); empty: "Linear"
  /// and "Embedding" are matched by name heuristics (see above).
  virtual const std::map<std::string, std::vector<std::string>>& module_classes() const;
  /// Conv2d module name -> its attributes as JSON ({"stride", "padding", "dilation",
  /// "padding_mode", "groups"}, torch's values), when the model is known. Low-rank needs them to
  /// decompose a 4-D conv weight (they are not in the weights; ptdeco's config records them):
  /// without them only 2-D weights are decomposed.
  virtual const std::map<std::string, std::string>& conv_modules() const;
  /// Other files to write beside the weights (name -> contents; plain names, e.g.
  /// "generation_config.json"), inside the same atomic output.
  virtual std::map<std::string, std::string> extra_files() const { return {}; }
};

/// Tensors in caller memory, or produced one at a time by a callback (a PyTorch state dict: each
/// parameter is handed over as a view of its own storage, no second copy of the model).
class BufferSource final : public TensorSource {
 public:
  struct Entry {
    std::string name;
    DType dtype = DType::F32;
    Shape shape;
  };
  /// fetch(i): tensor i's bytes, row-major (safetensors layout), exactly its size; the span must
  /// stay valid until the next call to fetch or the end of the compress call. Called once per
  /// tensor and pass (the writer reads each tensor once, twice for sparse-bitmask / nvfp4).
  using Fetch = std::function<std::span<const std::byte>(size_t i)>;
  struct Model {
    std::string config_json;                                         ///< the model's config.json text ("" = none)
    std::map<std::string, std::vector<std::string>> module_classes;  ///< see TensorSource
    std::map<std::string, std::string> extra_files;                  ///< see TensorSource
    std::map<std::string, std::string> conv_modules;                 ///< see TensorSource
  };
  /// Throws Error{invalid_argument} for an empty or duplicate name, a shape whose size overflows,
  /// or an extra file name that is not a plain file name.
  BufferSource(std::vector<Entry> entries, Fetch fetch, Model model = {});

  std::span<const TensorInfo> tensors() const override { return infos_; }
  void read(size_t i, uint64_t r0, uint64_t r1, std::span<std::byte> out, DType dtype) override;
  std::string origin(size_t) const override { return "memory"; }
  std::string config_json() const override { return model_.config_json; }
  std::string config_origin() const override { return "the model's config"; }
  const std::map<std::string, std::vector<std::string>>& module_classes() const override {
    return model_.module_classes;
  }
  const std::map<std::string, std::string>& conv_modules() const override { return model_.conv_modules; }
  std::map<std::string, std::string> extra_files() const override { return model_.extra_files; }

 private:
  std::vector<TensorInfo> infos_;
  Fetch fetch_;
  Model model_;
  size_t cached_ = SIZE_MAX;
  std::span<const std::byte> bytes_;
};

/// Compresses the tensors of `source` into `out_dir` (same options, checks, atomic output and
/// report as compress_checkpoint; nothing but the weights, config.json and the source's extra
/// files is written).
CompressReport compress(TensorSource& source, const std::filesystem::path& out_dir,
                        const CompressOptions& options = {});

/// Compresses the checkpoint at `in` (a .safetensors file or a model directory) into `out_dir`.
/// Throws ctstream::Error naming the file and tensor on any failure (unsupported dtype for the
/// format, group size not dividing the columns, non-finite weights, output not writable, write
/// failure, cancel); nothing is left under `out_dir` then.
CompressReport compress_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out_dir,
                                   const CompressOptions& options = {});

/// The formats the writer produces (the table above), in that order.
std::span<const Format> writer_formats() noexcept;
/// Their names, comma-separated ("dense, sparse-bitmask, ..."), for messages.
std::string writer_format_names();
/// A format the writer produces, by its name ("pack-quantized", ...); throws
/// Error{invalid_argument} "format must be one of ...; got 'NAME'" for any other.
Format writer_format_from_name(std::string_view name);
/// A strategy the writer quantizes weights with (tensor, channel, group, block, tensor_group), by
/// its name; throws Error{invalid_argument} for any other name (token and attn_head included).
QuantStrategy writer_strategy_from_name(std::string_view name);

/// The report as JSON text (what `ctstream compress --report FILE.json` writes).
std::string report_json(const CompressReport& report, const CompressOptions& options);
/// Refuses, Error{invalid_argument} naming `path`, a report path that is not the writer's to
/// write: inside (or equal to) the input checkpoint `input` or the output directory
/// `output_dir` (either may be empty: not checked), one of the input's files under another name
/// (a link or hard link to it), or, unless `overwrite`, anything that already exists.
void check_report_path(const std::filesystem::path& path, const std::filesystem::path& input,
                       const std::filesystem::path& output_dir, bool overwrite);
/// Writes report_json() to `path` after check_report_path(path, input, output_dir,
/// options.overwrite), the way every output is written: an exclusively created temporary file
/// beside it, renamed into place (a link at `path` is replaced, never followed). Throws Error{io}
/// naming the file.
void write_report_json(const std::filesystem::path& path, const CompressReport& report, const CompressOptions& options,
                       const std::filesystem::path& input = {}, const std::filesystem::path& output_dir = {});

/// The per-tensor quantization scheme `options` resolve to, e.g. "int4 group128 sym"; throws
/// Error{invalid_argument} for an inconsistent combination.
std::string describe_scheme(const CompressOptions& options);

}  // namespace ctstream
