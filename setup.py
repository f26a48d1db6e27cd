"""Builds cenv/ into jaxlab/_cenv<ext-suffix> with the system C compiler (see BUILD.md).

The library is loaded with ctypes, not imported; it is declared as an Extension only so that wheels
get a platform tag and editable installs build it in place.
"""

import importlib.util
import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

_spec = importlib.util.spec_from_file_location(
    "cenv_build", os.path.join(os.path.dirname(os.path.abspath(__file__)), "cenv", "build.py"))
cenv_build = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cenv_build)


class BuildCenv(build_ext):
    """Compiles cenv with cenv/build.py's flags instead of Python-extension flags."""

    def build_extension(self, ext):
        try:
            cenv_build.build(self.get_ext_fullpath(ext.name))
        except cenv_build.CompilerNotFound as err:
            sys.exit(f"error: {err}")


setup(
    ext_modules=[Extension("jaxlab._cenv", sources=["cenv/api.c"])],
    cmdclass={"build_ext": BuildCenv},
)
