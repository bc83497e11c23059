"""Builds the perfbuf wheel: the ctypes package (src/perfbuf) with its own
libperfbuf, compiled from the repository's C library crate (capi/) by
setuptools-rust. Everything else is in pyproject.toml.

From the repository the crate is ../../capi (pip builds a local directory
in place). An sdist carries a copy of the Rust workspace in rust/, so a
wheel built from the sdist alone (python -m build, pip from an sdist)
compiles the same sources.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.sdist import sdist
from setuptools_rust import Binding, RustExtension, Strip, build_rust

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
IN_SDIST = Path("rust")
# The C library's SONAME: the file keeps the name the loader would give it.
LIB_NAME = "libperfbuf.so.0"
# The Rust workspace the C library is built from, relative to its root.
WORKSPACE = ["Cargo.toml", "Cargo.lock", "LICENSE-MIT", "LICENSE-APACHE", "capi/Cargo.toml", "capi/build.rs",
             "capi/cbindgen.toml"]
WORKSPACE_TREES = ["src", "capi/src"]


def workspace_root() -> Path:
    """The copy in an sdist, else the repository around this directory."""
    if (HERE / IN_SDIST / "capi" / "Cargo.toml").is_file():
        return HERE / IN_SDIST
    if (REPO / "capi" / "Cargo.toml").is_file():
        return REPO
    raise SystemExit(f"perfbuf: no capi/Cargo.toml in {HERE / IN_SDIST} or {REPO}: build from the repository "
                     "(pip install ./bindings/python, with pip 21.3 or newer: older ones build a copy of the "
                     "directory) or from an sdist made there")


def cargo_args(root: Path) -> list[str]:
    """In the repository, a target directory of its own: cargo rustc
    --crate-type cdylib would otherwise rebuild over make's target/release
    each time (a CARGO_TARGET_DIR the user set wins)."""
    if root == REPO and "CARGO_TARGET_DIR" not in os.environ:
        return ["--target-dir", str(REPO / "target" / "python")]
    return []


def cargo_manifest_args(root: Path) -> list[str]:
    """Cargo.lock as it is in the repository; an sdist's workspace has fewer
    members, so cargo may drop their entries (the versions stay locked)."""
    return ["--locked"] if root == REPO else []


class build_perfbuf(build_rust):
    """Installs the cdylib as perfbuf/libperfbuf.so.0 (where _lib.py looks),
    not under a CPython extension-module name: nothing in it is Python's."""

    def get_dylib_ext_path(self, ext: RustExtension, target_fname: str) -> str:
        return str(Path(super().get_dylib_ext_path(ext, target_fname)).parent / LIB_NAME)


class bdist_wheel_any_python(bdist_wheel):
    """py3-none-<platform>: the library is loaded with ctypes, so one wheel
    serves every Python 3 of the platform."""

    def get_tag(self) -> tuple[str, str, str]:
        _, _, plat = super().get_tag()
        return "py3", "none", plat


class sdist_with_workspace(sdist):
    """Adds the Rust workspace (the core crate and capi/) under rust/."""

    def make_release_tree(self, base_dir: str, files: list[str]) -> None:
        super().make_release_tree(base_dir, files)
        root = workspace_root()
        dest = Path(base_dir) / IN_SDIST
        for name in WORKSPACE:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, dest / name)
        for tree in WORKSPACE_TREES:
            shutil.copytree(root / tree, dest / tree, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("target", "__pycache__"))
        # The copy's workspace is the two crates it has (other members stay
        # in the repository).
        manifest = dest / "Cargo.toml"
        text, n = re.subn(r"^(default-)?members\s*=\s*\[[^\]]*\]", r'\1members = [".", "capi"]',
                          manifest.read_text(), flags=re.MULTILINE)
        assert n, "Cargo.toml: no [workspace] members to rewrite"
        # Nor its examples: a target declared by name must have its file.
        text = re.sub(r"^\[\[example\]\]\n(?:[^\[\n].*\n|\n)*", "", text, flags=re.MULTILINE)
        manifest.write_text(text)
        # cargo reads its configuration from the working directory up: the
        # build runs at the sdist's top.
        config = Path(base_dir) / ".cargo" / "config.toml"
        config.parent.mkdir(exist_ok=True)
        shutil.copy2(root / ".cargo" / "config.toml", config)


def scratch_dir() -> str:
    """Where setuptools writes build/ and perfbuf.egg-info: a directory of
    its own, removed at exit, so that a build (pip builds in place) leaves
    nothing in the source tree, nor stale files for the next wheel."""
    path = tempfile.mkdtemp(prefix="perfbuf-build-")
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


ROOT = workspace_root()
SCRATCH = scratch_dir()
setup(
    rust_extensions=[
        RustExtension(
            "perfbuf.libperfbuf",
            path=str(ROOT / "capi" / "Cargo.toml"),
            binding=Binding.NoBinding,
            # Release even for editable installs (-e builds in place, in debug by default).
            debug=False,
            strip=Strip.Debug,
            cargo_manifest_args=cargo_manifest_args(ROOT),
            args=cargo_args(ROOT),
        )
    ],
    cmdclass={"build_rust": build_perfbuf, "bdist_wheel": bdist_wheel_any_python, "sdist": sdist_with_workspace},
    options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}},
    zip_safe=False,
)
