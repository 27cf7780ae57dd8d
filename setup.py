"""Build hook: the wheel carries configs/ and recipes/ inside the fa_train package."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

BUNDLED = ("configs", "recipes")  # located at run time by fa_train.resources


class BuildPyWithData(build_py):
    """build_py, then copy each bundled top-level folder into <build_lib>/fa_train/<folder>."""

    def run(self):
        super().run()
        for name in BUNDLED:
            self.copy_tree(name, os.path.join(self.build_lib, "fa_train", name))


setup(cmdclass={"build_py": BuildPyWithData})
