"""llama.cpp's own binaries (`llama-server`, `llama-quantize`) built from the llama.cpp vendored in the
llama-cpp-python sdist that `bench/engine_baselines.py` installs, so that both comparisons run the same llama.cpp.

The sdist is fetched with pip (`pip download --no-binary :all:`, the only registry reachable here), unpacked and
built with CMake under `~/.cache/recipe/llama.cpp-<version>/`; a binary already there is not rebuilt. CURL, OpenSSL
and the prebuilt web UI are off (no network at run time); `GGML_NATIVE` builds for this CPU, as pip's build of
llama-cpp-python does.

    python bench/llama_cpp_build.py --jobs 2     # builds llama-server and llama-quantize, prints their paths
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tarfile
import time
from pathlib import Path

from engine_baselines import LLAMA_CPP_VERSION

CACHE = Path.home() / ".cache" / "recipe" / f"llama.cpp-{LLAMA_CPP_VERSION}"
TARGETS = ("llama-server", "llama-quantize")
CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
)


def vendored_source(cache: Path = CACHE) -> Path:
    """The llama.cpp tree inside the unpacked llama-cpp-python sdist (downloaded and unpacked once)."""
    source = cache / f"llama_cpp_python-{LLAMA_CPP_VERSION}" / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").exists():
        return source
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / f"llama_cpp_python-{LLAMA_CPP_VERSION}.tar.gz"
    if not sdist.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                        f"llama-cpp-python=={LLAMA_CPP_VERSION}", "-d", str(cache)], check=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(cache, filter="data")
    return source


def binary(name: str, cache: Path = CACHE) -> Path:
    return cache / "build" / "bin" / name


def ensure_binaries(targets: tuple[str, ...] = TARGETS, jobs: int = 2, cache: Path = CACHE) -> dict[str, Path]:
    """{target: path of its executable}, building the missing ones (niced: the machine is shared)."""
    missing = [t for t in targets if not binary(t, cache).exists()]
    if missing:
        source = vendored_source(cache)
        build = cache / "build"
        print(f"building {' '.join(missing)} from llama.cpp in llama-cpp-python {LLAMA_CPP_VERSION} "
              f"into {build} (minutes)...", flush=True)
        start = time.perf_counter()
        if not (build / "CMakeCache.txt").exists():
            subprocess.run(["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], check=True)
        subprocess.run(["nice", "-n", "10", "cmake", "--build", str(build), "--config", "Release",
                        "-j", str(jobs), "--target", *missing], check=True)
        print(f"built in {time.perf_counter() - start:.0f} s", flush=True)
    return {t: binary(t, cache) for t in targets}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args()
    for name, path in ensure_binaries(jobs=args.jobs).items():
        print(name, path)


if __name__ == "__main__":
    main()
