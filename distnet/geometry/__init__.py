"""Pure index math of the spatial decomposition, for any number of spatial axes (a line, an image
plane, a volume): partitions, window rules, halo plans, and the cutting of a world into
``data x pipe x`` a spatial grid (``Py x Px``, ``Pz x Py x Px``). No MPI, no arrays."""
from .box import Box
from .grid import (GridLayout, GridPosition, check_grid, choose_grid, resolve_layout, valid_grids)
from .halo import HaloPlan, Transfer, chunk_box, output_plane, plan_halo
from .partition import block_of, block_partition, coords_of, grid_coords, grid_rank, tile_of
from .upsampling import LinearUpsample, NearestUpsample, TransposedWindow
from .window import Crop, Window, same_padding

__all__ = ["Box", "Crop", "GridLayout", "GridPosition", "HaloPlan", "LinearUpsample",
           "NearestUpsample", "Transfer", "TransposedWindow", "Window", "block_of",
           "block_partition", "check_grid", "choose_grid", "chunk_box", "coords_of", "grid_coords",
           "grid_rank", "output_plane", "plan_halo", "resolve_layout", "same_padding", "tile_of",
           "valid_grids"]
