"""The wheel's build step beyond pyproject.toml: the kernel library, prebuilt with nvcc into
kdtree/prebuilt/ (kdtree.build.write_prebuilt). An editable install builds nothing (the
library is built on first use); KDTREE_WHEEL_NO_PREBUILT=1 makes a wheel without it."""

import importlib.util
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithKernelLibrary(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or os.environ.get("KDTREE_WHEEL_NO_PREBUILT") == "1":
            return
        # kdtree.build from the source tree, loaded alone (the build env has no torch)
        spec = importlib.util.spec_from_file_location(
            "kdtree_build_for_wheel", Path(__file__).resolve().parent / "kernels" / "kdtree" / "build.py")
        build = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(build)
        record = build.write_prebuilt(Path(self.build_lib) / "kdtree" / "prebuilt")
        print(f"kdtree: prebuilt kernel library, build {record['build']} ({record['nvcc']})")


setup(cmdclass={"build_py": BuildWithKernelLibrary})
