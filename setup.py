"""The Python package uatlab for the interpreter that runs pip: its module _core is built by CMake
(the same build as scripts/test.sh, the target uatlab_python alone) and placed beside
python/uatlab/*.py. pyproject.toml holds the metadata; the version is CMakeLists.txt's.

    python3 -m venv --system-site-packages venv && venv/bin/pip install --no-build-isolation .

UATLAB_CMAKE_BUILD_DIR reuses a build folder (the test suite's, so that its test does not compile
everything again); by default the build goes to setuptools' temporary folder.
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(uatlab VERSION ([0-9.]+)", f.read()).group(1)


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("UATLAB_CMAKE_BUILD_DIR")
        if build:  # a build of this checkout, configured with -DUATLAB_PYTHON=ON: used as it is
            if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
                raise RuntimeError(f"UATLAB_CMAKE_BUILD_DIR={build} is not a configured build folder")
        else:
            build = os.path.join(os.path.abspath(self.build_temp), "cmake")
            subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                            "-DUATLAB_PYTHON=ON", f"-DUATLAB_PYTHON_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", build, "--target", "uatlab_python"], check=True)
        built = glob.glob(os.path.join(build, "python", "uatlab", "_core*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one module _core in {build}/python/uatlab, found {built}")
        dest = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(built[0], dest)


# setuptools' own folders go under build/setuptools, beside (not into) the CMake build in build/.
setup(version=version(), ext_modules=[Extension("uatlab._core", sources=[])], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": os.path.join("build", "setuptools")}})
