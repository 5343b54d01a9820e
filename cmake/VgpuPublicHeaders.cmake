# The public surface: the headers installed under <prefix>/include/vgpu/<folder>/ and
# included as "vgpu/<folder>/<file>.h". Every header in runtime/, allocator/, devices/ and
# strategies/ is in exactly one of the two lists below, so a new header is a conscious choice;
# the `public_headers` test (cmake/CheckPublicHeaders.cmake) fails otherwise, and when a
# public header includes a private one. tools/ and tests/ are never installed.
#
# Adding a header: put it in VGPU_PUBLIC_HEADERS if applications may include it (then every
# "vgpu/..." header it includes must be public too), else in VGPU_PRIVATE_HEADERS with the
# reason. A private entry ending in "/" covers a whole folder (a backend's own headers).
# Paths are relative to the repository root.

set(VGPU_PUBLIC_HEADERS
  runtime/bytes.h
  runtime/kernels.h
  runtime/fault_injector.h
  runtime/gzip.h
  runtime/mutex.h
  runtime/mpi/world.h
  runtime/nccl.h
  runtime/numbers.h
  runtime/pickle_reader.h
  runtime/platform.h
  runtime/platform_registry.h
  runtime/status.h
  runtime/zip.h

  allocator/allocator.h
  allocator/async_allocator.h
  allocator/bfc_allocator.h
  allocator/bucket_bitmap.h
  allocator/factory.h
  allocator/locks.h
  allocator/memory_history.h
  allocator/ptr_map.h
  allocator/sub_allocator.h
  allocator/sub_allocators.h
  allocator/trace.h
  allocator/trace_import.h
  allocator/vmm_allocator.h

  devices/cluster.h
  devices/config.h
  devices/device_name.h
  devices/logical_device.h
  devices/runtime.h
  devices/settings.h

  strategies/central_storage.h
  strategies/collectives.h
  strategies/collectives/communicator.h
  strategies/idx.h
  strategies/mirrored.h
  strategies/model.h
  strategies/model_parallel.h
  strategies/multi_worker_mirrored.h
  strategies/parameter_server.h
  strategies/nn.h
  strategies/stage_chain.h
  strategies/step_accounting.h
  strategies/strategy.h
  strategies/tensor.h
)

set(VGPU_PRIVATE_HEADERS
  runtime/cuda/               # the cuda backend's own: reached through runtime/platform.h
  runtime/host/               # the host backend's own: reached through runtime/platform.h
  runtime/status_matchers.h   # test helper, needs gmock (target vgpu::testing)
  runtime/file_io.h           # the tools' file reader
  runtime/json.h              # the tools' JSON writer
  runtime/json_reader.h       # the strict JSON reader behind devices/cluster.cc (TF_CONFIG)
  runtime/user_text.h         # quoting for the library's own error messages
  strategies/replica_eval.h   # shared by the strategies' .cc files
  strategies/collectives/internal.h  # the communicator implementations' shared parts
)
