# Cross compilation for 64-bit ARM with Debian's cross toolchain (g++-aarch64-linux-gnu), the
# ARM64 libraries installed beside the host's (multiarch), and qemu-user to run what it builds:
# scripts/cross-aarch64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
