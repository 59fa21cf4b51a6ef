// ctstream — command-line front end. Every subcommand uses only the public library API.
#include <csignal>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli.hpp"
#include "synth.hpp"

namespace {
void usage() {
  std::fprintf(
      stderr,
      "ctstream %s — lazy native loader for compressed-tensors checkpoints (ISA: %s)\n\n"
      "usage: ctstream <command> [options]\n"
      "  inspect PATH [--json]                      list every tensor: dtype, shape, format, bytes\n"
      "  decompress PATH OUT.safetensors [--dtype bf16|fp16|fp32] [--overwrite] [--quiet]\n"
      "                                             decode everything into a plain safetensors file\n"
      "  verify PATH [--quiet]                      decode everything, report problems (exit 1 on any)\n"
      "  bench PATH [--threads N] [--dtype bf16|fp16|fp32] [--budget BYTES] [--repeat K] [--cold]\n"
      "          [--arena] [--pread] [--json] [--tp RANK/SIZE [--tp-dim D]]\n"
      "                                             load every tensor into a reused buffer: GB/s, peak RSS\n"
      "  demo [DIR] [--small] [--overwrite]         write int4 / fp8 / sparse versions of a generated model,\n"
      "                                             stream each back, check it, measure it (DIR: new or\n"
      "                                             empty; default ~/.cache/ctstream/demo, replaced)\n"
      "  synth DIR [--layers N --hidden H --intermediate I --vocab V --shards S --dtype bf16]\n"
      "          [--overwrite]                      write a synthetic Llama-shaped dense checkpoint (DIR:\n"
      "                                             new or empty, or replaced with --overwrite)\n"
      "  compress IN OUT_DIR --format F [--bits 4 --group-size 128 --asymmetric --ignore NAME|re:PAT --shard-size "
      "5GB]\n"
      "                                             write a compressed-tensors checkpoint (see compress --help)\n\n"
      "common options: --pread (positional reads instead of mmap), --threads N (every command that reads\n"
      "  a checkpoint); inspect, decompress, verify and bench also take\n"
      "  --stored-factors (a low-rank checkpoint's factors as stored, not the original weights),\n"
      "  --stored-entries (every file's entries as safetensors reads them: no config.json applied),\n"
      "  --file-alone (one shard of a sharded model alone: no parts read from the other shards),\n"
      "  --module-classes FILE (JSON: module name -> its class names, for config groups that target\n"
      "  classes such as Linear / Embedding; without it such groups must be told apart by the stored parts)\n"
      "PATH is a .safetensors file or a model directory (with or without an index).\n",
      ctstream::version_string, ctstream::active_isa());
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "help")) {
    usage();
    return argc < 2 ? 2 : 0;
  }
  // Past RLIMIT_FSIZE (`ulimit -f`), write() raises SIGXFSZ, whose default action kills the
  // process mid-write, leaving its hidden temporary file or directory behind. Ignored, write()
  // fails with EFBIG instead (setrlimit(2), write(2)), which the writers report as an io error
  // after removing their temporaries - as under CPython, which ignores SIGXFSZ at startup.
  std::signal(SIGXFSZ, SIG_IGN);
  const std::string cmd = argv[1];
  try {
    if (cmd == "inspect") return cli::cmd_inspect(argc, argv);
    if (cmd == "decompress") return cli::cmd_decompress(argc, argv);
    if (cmd == "verify") return cli::cmd_verify(argc, argv);
    if (cmd == "demo") return cli::cmd_demo(argc, argv);
    if (cmd == "bench") return cli::cmd_bench(argc, argv);
    if (cmd == "synth") return cli::cmd_synth(argc, argv);
    if (cmd == "compress") return cli::cmd_compress(argc, argv);
    if (cmd == "--version" || cmd == "version") {
      std::printf("ctstream %s (ISA %s)\n", ctstream::version_string, ctstream::active_isa());
      return 0;
    }
    std::fprintf(stderr, "ctstream: unknown command '%s'\n\n", cmd.c_str());
    usage();
    return 2;
  } catch (const ctstream::Error& e) {
    std::fprintf(stderr, "ctstream %s: error [%s]: %s\n", cmd.c_str(),
                 std::string(ctstream::error_kind_name(e.kind())).c_str(), e.what());
    return 1;
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "ctstream %s: %s (see ctstream --help)\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ctstream %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
