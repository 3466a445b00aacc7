"""Packaging for dezero: the single source of metadata and extras."""
from setuptools import find_packages, setup

# cupy and NVRTC as wheels: with them the tests compile every generated CUDA kernel
# to PTX on a machine without a GPU (tests/test_gpu_compile.py). cupy 14's private
# kernel-source builder is what that test calls, hence the pin to one major version.
GPU_COMPILE = [
    'cupy-cuda12x>=14,<15; sys_platform == "linux" or sys_platform == "win32"',
    'nvidia-cuda-nvrtc-cu12>=12.2,<13; sys_platform == "linux" or sys_platform == "win32"',
]

# Data parallelism (dezero.distributed): mpi4py, and an MPI runtime as a wheel, so that
# `mpiexec` comes with it (mpi4py alone fails at import without a system MPI): MPICH on
# Linux and macOS, Intel MPI's runtime on Windows. threadpoolctl sets the threads of the
# BLAS numpy loaded, when ranks share a machine's cores.
DISTRIBUTED = ["mpi4py>=4,<5", 'mpich; sys_platform == "linux" or sys_platform == "darwin"',
               'impi-rt; sys_platform == "win32"', "threadpoolctl>=3"]

# The gpu extra installs cupy as a wheel built for CUDA 12 drivers (the source package
# `cupy` would compile itself and needs the CUDA toolkit); with CUDA 13 drivers,
# pip install cupy-cuda13x instead (README.md).
EXTRAS = {
    "gpu": ['cupy-cuda12x>=13; sys_platform == "linux" or sys_platform == "win32"'],
    "gpu-compile": GPU_COMPILE,
    "viz": ["graphviz>=0.20", "matplotlib>=3.5", "graphviz-pure"],
    "distributed": DISTRIBUTED,
    "test": ["pytest>=7", "hypothesis>=6", "pillow>=9", "tqdm>=4", *GPU_COMPILE, *DISTRIBUTED],
    "reference": ["torch==2.13.0"],
    # JupyterLab opens the notebooks, nbconvert runs them from the shell (jupyter
    # nbconvert --execute), nbclient runs them in the tests; the kernel is ipykernel;
    # graphviz-pure renders graphs where `dot` is missing.
    "notebooks": [
        "jupyterlab>=4", "nbconvert>=7", "nbclient>=0.7", "nbformat>=5", "ipykernel>=6",
        "matplotlib>=3.5", "scikit-learn>=1.1", "graphviz>=0.20", "graphviz-pure",
    ],
    # The docs build executes the notebooks and renders them as pages (mkdocs-jupyter).
    "docs": ["mkdocs>=1.5", "mkdocs-material>=9", "mkdocstrings[python]>=0.24",
             "mkdocs-jupyter>=0.24", "nbclient>=0.7", "nbformat>=5", "ipykernel>=6",
             "matplotlib>=3.5", "scikit-learn>=1.1", "graphviz>=0.20", "graphviz-pure"],
}

setup(
    name="dezero",
    version="0.1.0",
    description="An educational deep-learning framework: define-by-run autograd "
    "and a trace mode that compiles a run into a static graph.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="MIT",
    python_requires=">=3.10",
    packages=find_packages(include=["dezero", "dezero.*"]),
    # The C++ header every library of fused kernels includes (the cpu backend).
    package_data={"dezero.kernels": ["dezero_kernels.h"]},
    install_requires=["numpy>=1.23"],
    extras_require=EXTRAS,
    entry_points={"console_scripts": []},
)
