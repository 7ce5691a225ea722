"""Where this interpreter finds packages under an install prefix (cmake --install, CMakeLists.txt):
its own site directory when one lies under the prefix (~/.local: the user site; a venv: its
site-packages; /usr/local for Debian's python3: /usr/local/lib/python3.X/dist-packages), else the
same layout as its first site directory has under its own prefix.

usage: python3 python/site_dir.py PREFIX  ->  an absolute directory
"""
import os
import site
import sys

prefix = os.path.abspath(sys.argv[1])
sites = [os.path.abspath(p) for p in site.getsitepackages()]
user = site.getusersitepackages()
for path in ([os.path.abspath(user)] if isinstance(user, str) else []) + sites:
    if path.startswith(prefix + os.sep):
        print(path)
        sys.exit(0)
for path in sites:
    for base in ("/usr/local", sys.prefix, sys.base_prefix):
        if path.startswith(os.path.abspath(base) + os.sep):
            print(os.path.join(prefix, os.path.relpath(path, base)))
            sys.exit(0)
sys.exit(f"site_dir: no site directory of {sys.executable} to place under {prefix}")
