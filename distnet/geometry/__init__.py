"""Pure index math of the spatial decomposition: partitions, window rules, halo plans.
No MPI, no arrays."""
from .halo import HaloPlan, Transfer, chunk_box, output_plane, plan_halo
from .partition import Box, block_of, block_partition, grid_coords, tile_of
from .window import Window, same_padding

__all__ = ["Box", "HaloPlan", "Transfer", "Window", "block_of", "block_partition", "chunk_box",
           "grid_coords", "output_plane", "plan_halo", "same_padding", "tile_of"]
