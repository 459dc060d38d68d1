"""Pure index math of the spatial decomposition: partitions, window rules, halo plans, and the
cutting of a world into ``data x pipe x Py x Px``. No MPI, no arrays."""
from .grid import (GridLayout, GridPosition, check_grid, choose_grid, resolve_layout, valid_grids)
from .halo import HaloPlan, Transfer, chunk_box, output_plane, plan_halo
from .partition import Box, block_of, block_partition, grid_coords, tile_of
from .window import Window, same_padding

__all__ = ["Box", "GridLayout", "GridPosition", "HaloPlan", "Transfer", "Window", "block_of",
           "block_partition", "check_grid", "choose_grid", "chunk_box", "grid_coords", "output_plane",
           "plan_halo", "resolve_layout", "same_padding", "tile_of", "valid_grids"]
