"""The benchmarks, by kind: ``kernels``, ``engines``, ``labelers``, ``training``; ``common`` holds what they share.

Each is a module run from the repository root: ``python -m benchmarks.<kind>.<name> [options]`` (``--help``
says what it measures). Each prints its figures side by side, measured in one run, and writes JSON.
"""
