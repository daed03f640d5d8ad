"""Benchmarks of training runs: the GRPO step, the PID KL controller, the demo's seeds, the real-model study and its step breakdown."""
