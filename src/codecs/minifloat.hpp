// codecs — small float formats (F8 variants, FP4 E2M1, FP6 E2M3, E8M0) to f32, exactly. They
// live in codecs/element.hpp, shared with the CUDA kernels (one arithmetic, two targets); this
// header names them for the CPU code.
#pragma once
#include "codecs/element.hpp"
