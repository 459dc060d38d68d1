"""Helpers that run distnet's device code paths without a GPU, for the test suite, the
benchmarks and the GPU check's rehearsal (``bin/gpu-check --cpu``).

* :mod:`.devicelike`: a numpy-backed stand-in for cupy (strict host/device separation, call and
  wait counts, a free-memory figure) and its backend, :class:`~.devicelike.DeviceLike`;
* :mod:`.cuda_emulator`: the CUDA C of :mod:`distnet.ops.cuda` compiled for the host and run
  thread by thread (the device-like module launches kernels through it);
* :mod:`.measure`: the device arrays a block of code allocates, the device waits per step;
* :mod:`.backends`: the array backends the op tests run on, and the stated CPU-vs-device
  agreement tolerance.

Importing :mod:`.devicelike` registers the ``devicelike`` array module (``sys.modules``,
:data:`distnet.backend.DEVICE_ARRAY_MODULES`, a kernel runner): distnet itself never imports
this package (``tests/unit/test_imports.py`` holds it to that).
"""
