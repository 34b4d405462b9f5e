"""Build of the compiled fast path.

Every ``pyx/_*.pyx`` becomes an extension module ``fastpath._*``.  Compiler
directives are set once here for the whole build (as scikit-learn does):
bounds checking and negative indexing off, C division on.  ``FASTPATH_DEBUG=1``
turns bounds checking back on (and builds with -O1 -g and assertions) so the
test suite can catch out-of-bounds accesses.  ``FASTPATH_ONLY=_lpm,_x`` limits
the build to some modules (developer convenience).  ``FASTPATH_ASAN=1`` (with
``FASTPATH_DEBUG=1``) adds AddressSanitizer: in the debug build every packet
is processed in a heap buffer that ends where the packet ends, so a read past
a packet's last byte is reported.
"""
import glob
import os
import sys

import numpy
from Cython.Build import cythonize
from setuptools import Extension, setup

DEBUG = os.environ.get("FASTPATH_DEBUG", "") not in ("", "0")
ONLY = [m for m in os.environ.get("FASTPATH_ONLY", "").split(",") if m]

directives = {
    "language_level": 3,
    "boundscheck": DEBUG,
    "wraparound": False,
    "cdivision": True,
    "initializedcheck": DEBUG,
    "nonecheck": False,
    "embedsignature": True,
}

if DEBUG:
    cflags = ["-O1", "-g", "-UNDEBUG", "-DFASTPATH_DEBUG=1"]
else:
    cflags = ["-O3", "-DNDEBUG"]
cflags += ["-std=gnu11", "-fno-strict-aliasing", "-Wno-unused-function"]
# ``cdef inline`` means inline: gcc otherwise keeps the fast path's larger
# helpers (route cache probe, nexthop checks, the Ethernet build) as calls,
# spilling the packet's state around each (End: 605 -> 521 instructions per
# packet, callgrind; 32.5 -> 30.6 ns).
cflags.append("-DCYTHON_INLINE=__inline__ __attribute__((always_inline))")
ldflags = []
if os.environ.get("FASTPATH_ASAN", "") not in ("", "0"):
    # AddressSanitizer (with FASTPATH_DEBUG=1): run Python with
    # LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0
    cflags += ["-fsanitize=address", "-fno-omit-frame-pointer"]
    ldflags += ["-fsanitize=address"]
if os.environ.get("FASTPATH_NATIVE", "") not in ("", "0"):
    cflags.append("-march=native")

def _drop_other_flavour(mod: str) -> None:
    """C files generated for the other flavour (debug: bounds checks) are
    never reused: a marker beside each records the flavour it was made for,
    and a C file of the other flavour is removed so that it is regenerated."""
    want = "debug" if DEBUG else "release"
    marker = os.path.join("pyx", f".{mod}.flavour")
    try:
        with open(marker) as f:
            have = f.read().strip()
    except OSError:
        have = None
    if have != want:
        try:
            os.remove(os.path.join("pyx", mod + ".c"))
        except OSError:
            pass
        with open(marker, "w") as f:
            f.write(want + "\n")


def _pkg_config(*pkgs):
    """(include dirs, library dirs, libraries) of pkg-config packages, or
    None when pkg-config or one of them is missing."""
    import shutil
    import subprocess
    if shutil.which("pkg-config") is None:
        return None
    try:
        out = subprocess.run(["pkg-config", "--cflags", "--libs"] + list(pkgs), check=True,
                             capture_output=True, text=True).stdout.split()
    except subprocess.CalledProcessError:
        return None
    return ([f[2:] for f in out if f.startswith("-I")], [f[2:] for f in out if f.startswith("-L")],
            [f[2:] for f in out if f.startswith("-l")])


# modules that need a system library: built only where pkg-config finds it
# (the AF_XDP backend of fastpath.run; without libxdp the AF_PACKET one works)
OPTIONAL = {"_afxdp": ("libxdp", "libbpf")}

extensions = []
for path in sorted(glob.glob(os.path.join("pyx", "_*.pyx"))):
    mod = os.path.splitext(os.path.basename(path))[0]
    if ONLY and mod not in ONLY:
        continue
    inc, libdirs, libs = [], [], []
    if mod in OPTIONAL:
        found = _pkg_config(*OPTIONAL[mod])
        if found is None:
            print(f"setup.py: {mod} not built: pkg-config does not find "
                  f"{' '.join(OPTIONAL[mod])} (apt-get install libxdp-dev libbpf-dev)",
                  file=sys.stderr)
            continue
        inc, libdirs, libs = found
    _drop_other_flavour(mod)
    extensions.append(
        Extension(
            "fastpath." + mod,
            [path],
            include_dirs=[numpy.get_include(), "pyx"] + inc,
            library_dirs=libdirs,
            libraries=libs,
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
            extra_compile_args=cflags,
            extra_link_args=ldflags,
        )
    )

setup(
    ext_modules=cythonize(
        extensions,
        include_path=["pyx"],
        compiler_directives=directives,
        force="--force" in sys.argv,
        nthreads=int(os.environ.get("FASTPATH_JOBS", "2")),
    ),
)
