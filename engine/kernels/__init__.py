"""Native CPU kernels of the engine (block-quantised matmuls, paged decode attention), built on first use."""
