"""Before training: is the folder of a sharded checkpoint one that every rank sees and can write?

A sharded checkpoint needs a folder every rank sees (a shared file system). Found at the first
save, after all the training, a folder that some rank cannot see ended the job with no
checkpoint at all. :func:`check_shared_folder` proves it before the first epoch instead: world
rank 0 makes a probe folder beside the checkpoint (``PATH.probe-TOKEN``) holding a token; every
rank reads the token there and writes a file of its own; a rank that cannot ends the job on
every rank, named in one line.
"""
import os
import secrets
import shutil

from ..errors import CheckpointError

PROBE = ".probe-"


def check_shared_folder(path, world):
    """Prove that every rank of ``world`` sees the folder of the sharded checkpoint ``path`` (as
    each rank resolves it: a relative path from its own working directory, as its save would)
    and can write into it (module docstring). Collective over ``world``; :class:`CheckpointError`
    on every rank otherwise (the failing ranks with their own reason, the others naming them)."""
    from ..comm.abort import run_collectively
    path = os.fspath(path)

    def make():
        if world.Get_rank() != 0:
            return None
        token = secrets.token_hex(6)
        try:
            os.makedirs(f"{path}{PROBE}{token}")
            with open(os.path.join(f"{path}{PROBE}{token}", "token"), "w") as f:
                f.write(token)
        except OSError as e:
            raise CheckpointError(f"cannot write checkpoint {path}: {e.strerror or e}") from None
        return token
    token = world.bcast(run_collectively(make, world), root=0)
    probe = f"{path}{PROBE}{token}"

    def visit():
        rank = world.Get_rank()
        try:
            with open(os.path.join(probe, "token")) as f:
                seen = f.read()
        except OSError:
            seen = None
        folder = os.path.dirname(os.path.abspath(path))
        if seen != token:
            raise CheckpointError(f"cannot write checkpoint {path}: rank {rank} does not see the folder rank 0 "
                                  f"writes it in (here {folder}); a sharded checkpoint needs a folder every rank "
                                  "sees (a shared file system); on node-local disks write a single file")
        try:
            with open(os.path.join(probe, f"rank-{rank}"), "w") as f:
                f.write(token)
        except OSError as e:
            raise CheckpointError(f"cannot write checkpoint {path}: rank {rank} cannot write into {folder}: "
                                  f"{e.strerror or e}") from None
    try:
        run_collectively(visit, world)
    finally:
        if world.Get_rank() == 0:
            shutil.rmtree(probe, ignore_errors=True)
