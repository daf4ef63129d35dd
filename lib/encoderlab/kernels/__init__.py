"""The tile plan (``tiles``, plain torch) and the GPU kernel that follows it (``tiled_triton``,
imported only where CUDA and Triton exist) (Lessons 3, 9)."""
