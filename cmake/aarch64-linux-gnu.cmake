# Cross-compiling for AArch64 Linux with Debian's g++-aarch64-linux-gnu; the tests run under
# qemu-user (CMAKE_CROSSCOMPILING_EMULATOR). Libraries come from the arm64 multiarch packages
# (libre2-dev:arm64, libpcre2-dev:arm64); header-only dependencies (nlohmann-json, Catch2) from the host.
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
find_program(CTSTREAM_QEMU_AARCH64 qemu-aarch64 REQUIRED)
# Run against the arm64 multiarch runtime (libc6, libstdc++6, libgomp1, libre2, libpcre2-8 :arm64 under /):
# with -L /usr/aarch64-linux-gnu the loader and libc of the cross packages (2.36-8cross1) met the
# multiarch libre2's libc (2.36-9+deb12uN) in one process, and the first thread never started.
set(CMAKE_CROSSCOMPILING_EMULATOR ${CTSTREAM_QEMU_AARCH64};-L;/)
# GCC's notes that std::pair<float, float> is passed differently than by GCC < 10.1 (-Wpsabi)
# concern mixing objects across that compiler change, which this build never does.
set(CMAKE_CXX_FLAGS_INIT "-Wno-psabi")
