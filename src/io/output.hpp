// io — creating output files safely: every temporary file or directory a writer makes gets an
// unpredictable name in the destination directory and is created exclusively (O_EXCL |
// O_NOFOLLOW, or mkdir): a file or symbolic link planted at that name makes creation fail
// instead of being followed and clobbered. Finished outputs are renamed into place (rename
// replaces a link at the final name, never its target).
//
// Temporary files and directories also go into a process-wide registry so that a signal handler
// can remove them (remove_registered_temps() is async-signal-safe); writers remove them
// themselves on error.
#pragma once
#include <cstdio>
#include <filesystem>
#include <string>

namespace ctstream::io {

/// 16 random hex digits (getrandom / std::random_device).
std::string random_token();

/// An exclusively created, registered temporary file `<dir>/.<stem>.ctstream-tmp-<token>`.
/// Without commit_to(), the destructor closes and removes it.
class TempFile {
 public:
  TempFile(const std::filesystem::path& dir, const std::string& stem);
  ~TempFile();
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  std::FILE* stream() const noexcept { return f_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  /// fflush + fsync + fclose, then rename onto `final`. Throws Error{io}.
  void commit_to(const std::filesystem::path& final);

 private:
  std::filesystem::path path_;
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
