"""GPU kernels: imported only where CUDA and Triton exist (Lesson 9)."""
