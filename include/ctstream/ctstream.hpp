// ctstream — umbrella header: the whole public C++ API.
#pragma once
#include "ctstream/bytes.hpp"
#include "ctstream/checkpoint.hpp"
#include "ctstream/cuda.hpp"
#include "ctstream/decompress.hpp"
#include "ctstream/dtype.hpp"
#include "ctstream/error.hpp"
#include "ctstream/safetensors_writer.hpp"
#include "ctstream/stream.hpp"
#include "ctstream/tensor.hpp"
#include "ctstream/version.hpp"
#include "ctstream/writer.hpp"
