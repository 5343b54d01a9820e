# cmake -DINPUT=<fatbin> -DOUTPUT=<header> -DNAME=<symbol> -P embed_fatbin.cmake
# Writes the fatbin as a C++ byte array (what bin2c does, without depending on it). Aligned to
# 64 bytes because cuModuleLoadData reads the image in place.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
# Break the one long line every 32 bytes (32 * 5 characters) to keep compilers happy.
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){32})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUTPUT}"
  "// Generated from runtime/cuda/kernels.cu by runtime/cuda/embed_fatbin.cmake. Do not edit.\n"
  "#include <cstddef>\n"
  "alignas(64) inline constexpr unsigned char ${NAME}[] = {\n${bytes}\n};\n"
  "inline constexpr std::size_t ${NAME}_size = ${size};\n")
