"""The package installs like a Python package: in a fresh venv, one
`pip install ./bindings/python` (setuptools-rust builds libperfbuf from the
repository's capi/ crate into the package) and `import perfbuf` reads real
records, with no `make install` and no PERFBUF_LIBRARY. The same from the
wheel `pip wheel` builds, which auditwheel finds manylinux-compatible, and
from a wheel built out of the sdist alone (away from the repository).

Building needs cargo and PyPI (for setuptools and setuptools-rust); reading
needs root with BPF. Each is a skip, and under CI=true a failure."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest
from conftest import TESTS, need_root

PACKAGE = TESTS.parent  # bindings/python
REPO = PACKAGE.parent.parent
# Generous: only against a hang (a cold build of the crate takes minutes on 2 CPUs).
BUILD_TIMEOUT = 1800


def user_env() -> dict[str, str]:
    """A user's environment: no PERFBUF_LIBRARY, nothing on PYTHONPATH (the
    test suite's venv points it at src/); the producer library stays (it is
    the test's BPF program, not perfbuf)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PERFBUF_LIBRARY", "PYTHONPATH", "VIRTUAL_ENV")}
    assert "PERFBUF_PRODUCER_LIBRARY" in env, "PERFBUF_PRODUCER_LIBRARY is not set (make producer-lib builds it)"
    return env


def fresh_venv(path: Path) -> Path:
    """python3 -m venv PATH; returns its interpreter."""
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=300)
    return path / "bin" / "python"


def pip(python: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *args],
                         env={**user_env(), **(env or {})}, capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert res.returncode == 0, f"pip {' '.join(args)} failed:\n{res.stdout}\n{res.stderr}"
    return res


def need_cargo() -> None:
    if shutil.which("cargo") is None:
        need_root("building the package needs cargo on PATH (Rust)")


def tree_listing() -> list[str]:
    """What a build could leave in the source tree (build/, *.egg-info, a library)."""
    return sorted(str(p.relative_to(PACKAGE)) for d in (PACKAGE, PACKAGE / "src", PACKAGE / "src" / "perfbuf")
                  for p in d.iterdir() if p.name != "__pycache__")


def read_with_installed(python: Path, cwd: Path) -> dict:
    """Runs installed_reader.py with the venv's interpreter, away from src/."""
    res = subprocess.run([str(python), str(TESTS / "installed_reader.py")], cwd=cwd, env=user_env(),
                         capture_output=True, text=True, timeout=120)
    if res.returncode == 3:
        need_root(res.stderr.strip())
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    venv = python.parent.parent.resolve()
    # The package's own copy, from the venv, and no other libperfbuf.
    assert out["library_in_site_packages"], out
    assert Path(out["library"]).is_relative_to(venv) and out["library"].endswith("/perfbuf/libperfbuf.so.0"), out
    assert Path(out["package"]).is_relative_to(venv), out
    assert out["mapped"] == [out["library"]], out
    # Every record sent, with its bytes, on its CPU, in order.
    assert out["got"] == out["want"] > 0 and out["records_match"], out
    return out


def test_pip_install_in_a_fresh_venv_reads_events(tmp_path: Path) -> None:
    need_cargo()
    python = fresh_venv(tmp_path / "venv")
    before = tree_listing()
    start = time.monotonic()
    res = pip(python, "install", str(PACKAGE))
    seconds = time.monotonic() - start
    # One wheel for every Python 3 (the library is loaded with ctypes).
    assert "-py3-none-linux_" in res.stdout, res.stdout
    assert tree_listing() == before, "pip install left files in bindings/python"
    out = read_with_installed(python, tmp_path)
    print(f"pip install ./bindings/python: {seconds:.0f} s; read {out['got']} records with {out['library']}")


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv with the packaging tools: auditwheel and build."""
    need_cargo()
    python = fresh_venv(tmp_path_factory.mktemp("tools") / "venv")
    pip(python, "install", "auditwheel", "build")
    return python


def test_built_wheel_is_manylinux_and_reads_events(tools: Path, tmp_path: Path) -> None:
    pip(tools, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(PACKAGE))
    (wheel,) = (tmp_path / "dist").glob("perfbuf-*.whl")
    show = subprocess.run([str(tools.parent / "auditwheel"), "show", str(wheel)], capture_output=True, text=True,
                          timeout=120)
    assert show.returncode == 0, show.stdout + show.stderr
    # Only the system libraries manylinux allows (libc, libgcc_s): the tag
    # follows from the newest glibc symbol the build machine's libc gave it.
    text = " ".join(show.stdout.split())
    assert 'is consistent with the following platform tag: "manylinux_' in text, show.stdout
    python = fresh_venv(tmp_path / "venv")
    pip(python, "install", str(wheel))
    read_with_installed(python, tmp_path)


def test_wheel_from_the_sdist_alone_reads_events(tools: Path, tmp_path: Path) -> None:
    """A wheel built from the sdist's files only, away from ../../capi: the
    sdist must carry the Rust workspace. Unpacked at the same place each
    time (under target/, where ../../capi does not exist), with the
    repository's cargo cache, so cargo rebuilds only what changed."""
    res = subprocess.run([str(tools), "-m", "build", "--sdist", "-o", str(tmp_path / "sdist"), str(PACKAGE)],
                         env=user_env(), capture_output=True, text=True, timeout=BUILD_TIMEOUT)
    assert res.returncode == 0, res.stdout + res.stderr
    (sdist,) = (tmp_path / "sdist").glob("perfbuf-*.tar.gz")
    unpacked = REPO / "target" / "python-sdist"
    shutil.rmtree(unpacked, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(unpacked, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (source,) = unpacked.iterdir()
    assert not (source.parent.parent / "capi").exists()
    cache = {"CARGO_TARGET_DIR": os.environ.get("CARGO_TARGET_DIR", str(REPO / "target" / "python"))}
    pip(tools, "wheel", "--no-deps", "-w", str(tmp_path / "dist"), str(source), env=cache)
    (wheel,) = (tmp_path / "dist").glob("perfbuf-*.whl")
    python = fresh_venv(tmp_path / "venv")
    pip(python, "install", str(wheel))
    read_with_installed(python, tmp_path)
