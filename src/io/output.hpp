// io — creating output files safely: every temporary file or directory a writer makes gets an
// unpredictable name in the destination directory and is created exclusively (O_EXCL |
// O_NOFOLLOW, or mkdir): a file or symbolic link planted at that name makes creation fail
// instead of being followed and clobbered. Finished outputs are renamed into place (rename
// replaces a link at the final name, never its target) under the rules of check_output(), the one
// place they live: never over something that is not a regular file (or a directory), over one of
// the input's own files, or over an output that appeared while the writer ran.
//
// Temporary files and directories also go into a process-wide registry so that a signal handler
// can remove them (remove_registered_temps() is async-signal-safe); writers remove them
// themselves on error.
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <span>
#include <string>

#include "io/file.hpp"

namespace ctstream::io {

/// 16 random hex digits (getrandom / std::random_device).
std::string random_token();

/// What a writer writes at its final path.
enum class OutputKind : uint8_t { file, directory };

/// What was at an output path when a writer started (lstat: a link is the link, not its target).
struct OutputSnapshot {
  bool existed = false;
  uint64_t device = 0, inode = 0;
};

/// The rules every writer (SafetensorsWriter, decompress_to_file, compress and the report file,
/// hence the CLI and the Python module) applies to its final path before it writes anything; the
/// commit functions below apply them again at the rename:
///  * what is there, after following a link, must be the kind of thing the writer makes: a
///    regular file (OutputKind::file) or a directory (::directory). A character or block device,
///    a FIFO, a socket, or a link to one is refused, Error{io} naming the path and what it is:
///    renaming a finished file onto /dev/null would replace the system's /dev/null;
///  * a directory must be empty unless `replace_dir` (compress --overwrite), Error{io};
///  * it must not be one of `inputs` (identities recorded when a reader opened them; a link is
///    followed, so a link or hard link to an input is that input), Error{invalid_argument}.
/// Returns the snapshot the commit compares against.
OutputSnapshot check_output(const std::filesystem::path& final, OutputKind kind, bool replace_dir = false,
                            std::span<const FileIdentity> inputs = {});

/// "a FIFO (named pipe)", "a character device", ... for messages.
std::string describe_file_type(unsigned mode);

/// Renames the finished file `tmp` onto `final`. An output absent at the start (`was`) is
/// created without replacing anything (renameat2 RENAME_NOREPLACE; link(2) where the filesystem
/// lacks it): one that appeared during the run is an Error{io}, left as it is. An output that
/// existed is replaced only if the name still holds the same file (RENAME_EXCHANGE, then the
/// swapped-out file's identity is checked; a different one is swapped back): a link at `final`
/// is replaced, never its target. `tmp` is left in place on error.
void commit_file(const std::filesystem::path& tmp, const std::filesystem::path& final, const OutputSnapshot& was);

/// Renames the finished directory `tmp` onto `final`. Without `replace`, `final` may be absent or
/// an empty directory at that instant (rename(2) itself puts a directory only over an empty one):
/// one created and filled during the run is an Error{io}, left as it is. With `replace`, an
/// existing output is swapped out in one atomic exchange (RENAME_EXCHANGE): @return true when
/// that happened, and `tmp` then holds the old output, for the caller to remove.
bool commit_directory(const std::filesystem::path& tmp, const std::filesystem::path& final, bool replace);

/// A writer's output file: check_output() at construction, then data goes to an exclusively
/// created, registered temporary file `<dir>/.<name>.ctstream-tmp-<token>` beside `final`, and
/// commit() flushes, fsyncs and commit_file()s it. Without commit(), the destructor closes and
/// removes the temporary file.
class OutputFile {
 public:
  explicit OutputFile(const std::filesystem::path& final, std::span<const FileIdentity> inputs = {});
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::FILE* stream() const noexcept { return f_; }
  /// The temporary file (for messages about a failed write).
  const std::filesystem::path& path() const noexcept { return path_; }
  /// fflush + fsync + fclose, then commit_file(). Throws Error{io}.
  void commit();

 private:
  std::filesystem::path final_, path_;
  OutputSnapshot was_;
  std::FILE* f_ = nullptr;
  int slot_ = -1;
  bool done_ = false;
};

/// Creates `<parent>/.<stem>.ctstream-<kind>-<token>` with mkdir (fails, rather than follows, if
/// anything exists there). Throws Error{io}.
std::filesystem::path make_temp_dir(const std::filesystem::path& parent, const std::string& stem, const char* kind);

/// Registers a temporary file for remove_registered_temps(); returns its slot (-1 when the
/// registry is full: the path is then only removed by its owner).
int register_temp(const std::filesystem::path& p) noexcept;
/// Registers a temporary directory the caller created (make_temp_dir) and alone writes into:
/// remove_registered_temps() removes everything in it (finished files too), then the directory.
/// Unregister it once it has been renamed into place or removed.
int register_temp_dir(const std::filesystem::path& p) noexcept;
void unregister_temp(int slot) noexcept;
/// unlink()s every registered temporary file, then empties and rmdir()s every registered
/// temporary directory. Async-signal-safe.
void remove_registered_temps() noexcept;

}  // namespace ctstream::io
