"""Benchmarks of the fused kernels (token statistics, image-attention mass, training log-probs) against plain PyTorch, and their GPU checks."""
