#!/usr/bin/env bash
# Installs what building and testing libperfbuf needs on Debian 12, then
# builds the library. Run as root (or with sudo available).
set -euo pipefail
cd "$(dirname "$0")/.."

export PATH="$HOME/.cargo/bin:$PATH"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# libbpf-dev: the reference library and its headers (differential tests);
# libelf-dev, zlib1g-dev: libbpf-rs's vendored libbpf (make interop-test);
# gcc/g++/make: the C harness and header checks; binutils: nm for the export check;
# clang: the examples' BPF program; valgrind: memcheck runs; python3-venv,
# golang-go, golang-github-cilium-ebpf-dev: the Python and Go packages and
# their examples (cilium/ebpf also for make bench's peer reader); linux-perf:
# perf script/report, which the perf.data and side-band tests compare with;
# bpftool and sudo: the docs' commands use them, and make docs-test runs
# those as written; prometheus (and its promtool): the metrics tests scrape
# the command with it. python3-numpy: make docs-test runs the Python README's
# NumPy example with the system python3 (python-test installs NumPy in its
# venv); python3-bpfcc: make bench's bcc row (bench/python_rows.py).
$SUDO apt-get install -y -qq --no-install-recommends libbpf-dev libelf-dev zlib1g-dev gcc g++ make binutils pkg-config clang valgrind \
	python3 python3-venv python3-numpy python3-bpfcc golang-go golang-github-cilium-ebpf-dev linux-perf bpftool sudo prometheus >/dev/null
# The tests start their own Prometheus on a free port; the package's
# service (port 9090, scraping itself) is not needed.
if command -v systemctl >/dev/null && systemctl is-enabled prometheus >/dev/null 2>&1; then
	$SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi

if ! command -v cargo >/dev/null; then
	echo "cargo not found: install Rust (rustup) first" >&2
	exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# The nightly toolchain builds the fuzz targets (libFuzzer + ASan) and the
# ThreadSanitizer library (-Zbuild-std needs rust-src).
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
rustup component add rust-src --toolchain nightly >/dev/null
make
