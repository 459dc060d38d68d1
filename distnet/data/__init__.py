"""The data engine: what the dataset kinds of :mod:`distnet.datasets` are made of.

A dataset kind (what a YAML file names: ``MNIST``, ``HDF5Dataset``, ...) says where its files
are and what they hold; everything it does with them is composed from the rooms of this package,
none of which knows a kind by name:

=====================  ===========================================================================
``sources``            where one split is stored, read a few rows of one tile at a time (HDF5
                       hyperslabs, memory-mapped ``.npy`` and IDX files, arrays in memory)
``reading``            the ``read`` key as a strategy: every rank opens its files, or one rank
                       per job (``root``) or per node (``node``) reads and sends the others their
                       tiles (``header``: what the reader tells them before any pixel)
``cache``,             per-rank caches at ``serialized_path`` / ``cache_dir`` (float arrays) and
``tile_cache``         streaming tile caches (a rank's tile as stored)
``stream``             a split read per minibatch, with read-ahead
``augment``            random crops and flips drawn per image and epoch, gathered per tile
``scaling``, ``stats`` stored values to the model's floats; per-channel statistics
``selection``          which rows ``sample_pct`` keeps
``checks``,            finite pixels and class labels; fingerprints that make the ranks of a job
``fingerprints``       agree on their data
``memory``             data bytes per rank, in memory or streamed
``idx``,               file formats: MNIST's IDX, pickles that cannot run code, the images and
``safe_pickle``,       predictions of ``distnet predict``, the sequence layout
``predict_files``,
``sequences``
=====================  ===========================================================================

The engine talks to MPI only through :mod:`distnet.comm` (``read: root`` / ``node`` and the
fingerprint comparison take a communicator or a :class:`~distnet.comm.root_read.DataReader`) and
never imports a dataset kind; the converters of ``distnet data`` (:mod:`distnet.convert`) write
the files it reads (docs/design.md#layers-of-the-code).
"""
