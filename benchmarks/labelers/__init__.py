"""Benchmarks of the pseudo-labelers and best-of-N: the labelling stage, Dawid-Skene, adversarial votes, VisConf's protocol, retrieval."""
