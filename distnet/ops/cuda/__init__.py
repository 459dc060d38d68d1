"""Fused CUDA kernels of the device path: one launch where the array-module code would take one
launch per filter tap, window offset or time step.

A GPU step pays, beyond its arithmetic, a kernel launch (and Python dispatch) for every array
operation. The generic ``xp`` code of :mod:`distnet.ops` loops over filter taps (col2im's fold,
local filtering, LCN) and window offsets (pooling), so small models are launch-bound there. The
kernels here do the same arithmetic in one launch each, in the CUDA C of
:class:`~distnet.ops.cuda.launch.Kernel`.

Rules every kernel keeps:

* **numpy never comes here.** The CPU path keeps its numpy kernels, bit for bit; an op declares
  its fused kernel beside its array code, and :mod:`distnet.ops.dispatch` runs it only when
  :func:`~distnet.ops.cuda.launch.available` says the arrays' module can launch one (cupy on a
  GPU; the device-like module of :mod:`distnet.testing`, which runs the same CUDA C compiled
  for the host).
* **Window loops are written once** (:mod:`.windows`): the kernels that gather the output
  windows covering an input element are generated from one loop, for any number of spatial
  axes.
* **One thread per output element, no atomics.** Every output element is written by exactly one
  thread, which adds its terms in a fixed order (the order the numpy kernel adds them where it
  can), so results do not depend on scheduling and two runs give the same bits.
* **Grid-stride loops over 64-bit indices**, so any launch size covers any array size.
* **Contiguous arrays only**: a kernel gets raw pointers; :meth:`Kernel.__call__` refuses a
  strided view instead of reading the wrong elements.
"""
