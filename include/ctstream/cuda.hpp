// ctstream — decode a tensor straight into CUDA device memory.
//
//   if (ctstream::cuda::available()) {
//     void* d;  cudaMalloc(&d, ckpt.output_bytes(t, ctstream::DType::BF16));
//     ctstream::cuda::decode_into_device(ckpt, t, d, bytes, ctstream::DType::BF16, stream);
//     cudaStreamSynchronize(stream);  // the decode is asynchronous on `stream`
//   }
//
// The stored parts travel file -> pinned host staging (two 16 MiB slots at most) -> device,
// and a kernel decodes them there with the same per-element arithmetic as the CPU decoders
// (src/codecs/element.hpp), so the device output is bit-identical to decode_into()'s. This
// header exists in every build; without CUDA (CTSTREAM_CUDA=OFF) or without a device,
// available() is false and decode_into_device() throws Error{unsupported}.
#pragma once
#include <cstdint>
#include <optional>

#include "ctstream/checkpoint.hpp"

namespace ctstream::cuda {

/// True when this build has the CUDA decode path and the process sees at least one CUDA
/// device. Never throws; safe on machines without a driver (then false).
bool available() noexcept;

/// Decodes `t` (or the slice of it) into `device_ptr` (device memory of the current device,
/// `device_bytes` long) as `out_dtype`, with the rules of Checkpoint::decode_into (same output
/// bytes, same errors). Every check of the stored data runs on the host first
/// (Checkpoint::validate); then the parts are copied to the device and decoded there, in order on
/// `cuda_stream` (a cudaStream_t; nullptr = the default stream). Returns once the stored bytes
/// have reached the device and the decode is queued: synchronise the stream before reading the
/// output. @return bytes the decode writes.
/// A low-rank tensor (W = B @ A) is computed by the host decoder, then copied. `device_ptr` must be
/// aligned to the output's element size (cudaMalloc's are), else Error{invalid_argument}.
/// Throws Error{unsupported} without CUDA or a device, Error{buffer_too_small}, and the Errors
/// decode_into() throws for the same tensor; a CUDA failure is Error{out_of_memory} (allocation)
/// or Error{internal} naming the CUDA call.
uint64_t decode_into_device(const Checkpoint& ckpt, const TensorInfo& t, void* device_ptr, uint64_t device_bytes,
                            DType out_dtype, void* cuda_stream = nullptr, const std::optional<Slice>& slice = {});

}  // namespace ctstream::cuda
