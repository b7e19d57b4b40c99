"""The emulated accelerator: torch's PrivateUse1 device computing in host memory, under any name.

One package, one file per part (importing the package loads none of them):

- ``spec``: what a process's emulated devices are (type, count, capacity; ``ANYACCEL_EMULATED``).
- ``state``: what this process installed (the one holder of the spec and the native core) and
  the rules for installing (the torch it needs, one PrivateUse1 device type per process).
- ``runtime``: ``install()``, which builds and loads the native core and registers
  ``torch.<type>``; ``torch_module``: that ``torch.<type>`` module; ``inductor``: the device
  registered with torch.compile's inductor and Dynamo (or inductor's clear refusal where torch
  lacks the hooks); ``shutdown``: the clean exit after backward; ``stream_sanitizer``: the
  opt-in check for a tensor used on two streams with no synchronisation between.
- ``native_builders`` and ``csrc/``: the native parts, the device (``emulated_device.cpp``, one
  translation unit over one header per concern; ``cpu_kernel_ops.h`` says which ops may run on
  the CPU's kernels) and its c10d ``Backend``
  (``host_view_backend.cpp``).
- ``collective_registration``: its collective backend name registered with torch;
  ``collectives``: the c10d ``Backend`` torch makes for a group (over ``anyaccel_shm``).
- ``accelerator``: ``EmulatedAccelerator``, the backend detection chooses; its probe registers
  ``checkpoints``' hint (a checkpoint saved on an emulated device, loaded where none is).
- ``vendor_modules`` and ``vendor_processes``: simulated vendor runtimes (``torch_npu``, ...)
  whose device state is the emulated device's, for a test or a whole process.

``anyaccel.testing.emulated`` and ``anyaccel.backends.emulated`` are the documented doors.
"""
