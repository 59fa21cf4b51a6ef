// ctstream inspect PATH [--json]
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.hpp"

namespace cli {

int cmd_inspect(int argc, char** argv) {
  Args a = parse(argc, argv, 2, with_open_switches({"--json"}), {"--threads", "--module-classes"});
  if (a.pos.size() != 1) throw std::invalid_argument("inspect needs exactly one PATH");
  auto ckpt = ctstream::Checkpoint::open(a.pos[0], open_options(a));
  uint64_t stored = 0, decoded = 0;
  std::map<std::string, size_t> by_format;
  for (const auto& t : ckpt.tensors()) {
    stored += t.stored_bytes();
    decoded += t.decoded_bytes(t.dtype);
    ++by_format[std::string(ctstream::format_name(t.format))];
  }
  if (a.has("--json")) {
    nlohmann::ordered_json j;
    j["path"] = ckpt.name();
    j["files"] = nlohmann::json::array();
    for (const auto& f : ckpt.files()) j["files"].push_back(f.string());
    const ctstream::ConfigInfo& ci = ckpt.config_info();
    j["config"] = {{"compressed_tensors", ci.compressed_tensors},
                   {"file", ci.file.empty() ? nlohmann::json(nullptr) : nlohmann::json(ci.file.string())},
                   {"description", ci.description}};
    j["tensors"] = nlohmann::json::array();
    for (const auto& t : ckpt.tensors()) {
      nlohmann::ordered_json e;
      e["name"] = t.name;
      e["dtype"] = std::string(ctstream::dtype_name(t.dtype));
      e["stored_dtype"] = std::string(ctstream::dtype_name(t.parts.front().dtype));
      e["shape"] = t.shape;
      e["format"] = std::string(ctstream::format_name(t.format));
      if (t.quantized) e["scheme"] = scheme_str(t);
      e["stored_bytes"] = t.stored_bytes();
      e["decoded_bytes"] = t.decoded_bytes(t.dtype);
      e["parts"] = nlohmann::json::array();
      for (const auto& p : t.parts)
        e["parts"].push_back({{"role", p.role},
                              {"key", p.key},
                              {"dtype", std::string(ctstream::dtype_name(p.dtype))},
                              {"shape", p.shape},
                              {"file", p.file},
                              {"offset", p.offset},
                              {"bytes", p.nbytes}});
      j["tensors"].push_back(std::move(e));
    }
    j["totals"] = {{"tensors", ckpt.tensors().size()},
                   {"stored_bytes", stored},
                   {"decoded_bytes", decoded},
                   {"formats", by_format}};
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  size_t w = 4;
  for (const auto& t : ckpt.tensors()) w = std::max(w, t.name.size());
  std::printf("%-*s  %-8s %-20s %-22s %-18s %12s %12s\n", static_cast<int>(w), "name", "dtype", "shape", "format",
              "scheme", "stored", "decoded");
  for (const auto& t : ckpt.tensors()) {
    std::printf("%-*s  %-8s %-20s %-22s %-18s %12s %12s\n", static_cast<int>(w), t.name.c_str(),
                std::string(ctstream::dtype_name(t.parts.front().dtype)).c_str(), shape_str(t.shape).c_str(),
                std::string(ctstream::format_name(t.format)).c_str(), scheme_str(t).c_str(),
                human_bytes(t.stored_bytes()).c_str(), human_bytes(t.decoded_bytes(t.dtype)).c_str());
  }
  std::printf("\n%zu tensors in %zu file(s); stored %s, decoded %s", ckpt.tensors().size(), ckpt.files().size(),
              human_bytes(stored).c_str(), human_bytes(decoded).c_str());
  for (const auto& [f, n] : by_format) std::printf("; %s: %zu", f.c_str(), n);
  const ctstream::ConfigInfo& ci = ckpt.config_info();
  std::printf("\nconfig: %s%s%s\n",
              ci.compressed_tensors ? "compressed-tensors checkpoint, " : "plain safetensors, entries as stored: ",
              ci.description.c_str(), ci.file.empty() ? "" : (" [" + ci.file.string() + "]").c_str());
  return 0;
}

}  // namespace cli
