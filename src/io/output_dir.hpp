// io — an output directory written atomically, the rules of io/output.hpp applied to a whole
// directory: everything is written into a hidden temporary directory beside the final one
// (registered for removal on signals), which replaces it only at commit(); an error, a cancel or
// a crash leaves nothing under the final name. Used by `ctstream compress` (src/writer/job.cpp),
// which decides what goes in; this type knows only paths, files and the filesystem.
#pragma once
#include <sys/stat.h>

#include <filesystem>
#include <functional>
#include <string>

namespace ctstream::io {

class OutputDir {
 public:
  /// Checks and claims `final`: its parent must exist (Error{io}); it may neither be, contain nor
  /// lie inside `input` (when not empty; compared on resolved paths, links followed:
  /// Error{invalid_argument}); io::check_output's rules for a directory (a device, FIFO or socket
  /// is refused, a non-empty directory unless `replace`); then the temporary directory is made
  /// (Error{io} "output directory is not writable" otherwise).
  OutputDir(const std::filesystem::path& final, bool replace, const std::filesystem::path& input = {});
  /// Removes the temporary directory (and what it holds) unless commit() handed it over.
  ~OutputDir();
  OutputDir(const OutputDir&) = delete;
  OutputDir& operator=(const OutputDir&) = delete;

  /// The final directory, absolute and normalised.
  const std::filesystem::path& path() const noexcept { return final_; }
  /// The temporary directory everything is written into.
  const std::filesystem::path& temp() const noexcept { return tmp_; }

  /// Writes a small file `rel` exclusively (a name that exists, a planted link included, is an
  /// error). Throws Error{io}.
  void write_text(const std::filesystem::path& rel, const std::string& text) const;
  /// Copies the regular file `src`, which stat() described as `expect`, to `rel` (parent
  /// directories created); refuses a file that changed identity since (swapped for a FIFO, ...).
  /// `poll` runs between chunks (it may throw to cancel). Throws Error{io}.
  void copy_file(const std::filesystem::path& src, const struct stat& expect, const std::filesystem::path& rel,
                 const std::function<void()>& poll) const;
  /// fsync, then the temporary directory takes the final name (io::commit_directory: without
  /// `replace`, an output that appeared or filled during the run is not replaced). Throws Error{io}.
  void commit();

 private:
  std::filesystem::path final_, tmp_;
  bool replace_ = false;
  int slot_ = -1;  ///< io::register_temp_dir
  bool keep_ = false;
};

/// Whether `p` lies on a kernel pseudo-filesystem (/proc, /sys, ...): its "regular" files are
/// generated on read (a link into /proc/self would copy the process's environment).
bool on_pseudo_fs(const std::filesystem::path& p);

}  // namespace ctstream::io
