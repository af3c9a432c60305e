"""kdtree: the verify-attention kernel and SGLang patch that ship to the serving host.

This package imports nothing from the gate (``kdgate``). Importing it does not import
SGLang or touch CUDA; the SGLang plugin entry point is :func:`kdtree.plugin.register`.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kdtree-gate")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
