"""Benchmarks of the rollout engines: HF generate, prompt-shared and vLLM sampling, recording the signals while sampling."""
