// The source tree's absolute paths, compiled into this unit alone (tests/CMakeLists.txt gives it the
// definitions): the other test units' flags are the same in every clone, so a fresh clone elsewhere
// finds them in ccache (tools/run_tests.sh) and recompiles only this one.
#include "helpers.hpp"

namespace th {

std::filesystem::path fixtures() { return CTSTREAM_FIXTURES; }
std::filesystem::path source_dir() { return CTSTREAM_SOURCE_DIR; }

}  // namespace th
