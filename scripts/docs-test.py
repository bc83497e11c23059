#!/usr/bin/env python3
"""make docs-test: every code block of README.md and the binding READMEs
runs, or compiles, as written, so that none can drift from the code.

Each fenced block is preceded by a comment saying how it is checked:

    <!-- docs-test: KIND ARGS... -->

  run SESSION [cwd=DIR]   shell, run by bash (-eu -o pipefail) in SESSION's
                          shell, after the session's earlier blocks (its
                          exports and activated venv stay); each block starts
                          in DIR (default: the session's directory)
  output SESSION          what the session's block just above printed: each
                          line, numbers aside, is among the lines it printed
  holds SESSION PATH      what the file PATH holds once the session ran: each
                          line is one of its lines
  file SESSION PATH       written to PATH (in the session's directory) before
                          the session runs
  c CONTEXT               C, compiled with -Wall -Wextra -Werror in CONTEXT's
                          frame (CONTEXTS_C: the declarations it assumes)
  bpf CONTEXT             a BPF program in C, compiled for the BPF target
                          (clang, libbpf's headers, include/perfbuf.bpf.h)
                          after CONTEXT's declarations (CONTEXTS_BPF)
  rust CONTEXT            Rust, built (and run, where CONTEXT says) in a crate
                          whose Cargo.toml is README's dependency block
  rust-interop PROJECT,.. Rust, built and run as a program of each
                          tests/interop/PROJECT (libbpf-rs, aya/0.13, aya/0.14)
  toml                    the [dependencies] of that crate
  python CONTEXT          Python, run after CONTEXT's prelude (tests/docs/
                          fixtures.py: a BPF map with records, a program)
  go CONTEXT              Go, built in CONTEXT's frame in a module over the
                          package (and Debian's cilium/ebpf, offline)
  text                    not code: a layout, sample messages
  not-run REASON          cannot run here, and why (the small list below)

A block without a comment, or with an unknown kind, fails. Blocks run as
root in a private mount namespace: overlays on the repository, /usr/local,
/etc and /home take whatever they write (venvs, `make install`, ldconfig's
cache), a bpffs of their own is at /sys/fs/bpf, and target/ is the real
one (so builds are reused). One "ok" or "FAILED:" line per block, then
"docs-test: N passed, M failed".

    scripts/docs-test.py [--list]
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = ["README.md", "bindings/python/README.md", "bindings/go/README.md"]
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
ANNOTATION = re.compile(r"^\s*<!-- docs-test: (.*?) -->\s*$")
KINDS = {"run", "output", "holds", "file", "c", "bpf", "rust", "rust-interop", "toml", "python", "go", "text", "not-run"}
CI = os.environ.get("CI") == "true"


@dataclass
class Block:
    doc: str
    line: int
    lang: str
    text: str
    kind: str
    args: list[str]
    output: str = ""  # what a run block printed
    error: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    def option(self, name: str, default: str = "") -> str:
        for a in self.args:
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        return default


def parse(doc: str) -> tuple[list[Block], list[str]]:
    """The fenced blocks of `doc` and the problems of their annotations."""
    lines = (REPO / doc).read_text().splitlines()
    blocks, problems = [], []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.groups()
        end = i + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        text = textwrap.dedent("\n".join(lines[i + 1:end])) + "\n"
        note = ANNOTATION.match(lines[i - 1]) if i > 0 else None
        where = f"{doc}:{i + 1}"
        if not note:
            problems.append(f"{where}: a ```{lang} block without a <!-- docs-test: KIND ... --> line before it")
        else:
            words = shlex.split(note.group(1))
            if not words or words[0] not in KINDS:
                problems.append(f"{where}: unknown docs-test kind {words[:1]}")
            else:
                blocks.append(Block(doc, i + 1, lang, text, words[0], words[1:]))
        i = end + 1
    return blocks, problems


# ---- the private mount namespace ---------------------------------------------------

SCRATCH = Path(os.environ.get("DOCS_TEST_SCRATCH", "/tmp/perfbuf-docs-test"))
HOME = Path("/home/you")  # Go's README: /home/you/src/perfbuf in its go.mod


def mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True)


def overlay(target: Path, name: str) -> None:
    """Writes under `target` go to a scratch layer, gone with the namespace."""
    upper, work = SCRATCH / "upper" / name, SCRATCH / "work" / name
    upper.mkdir(parents=True)
    work.mkdir(parents=True)
    mount("-t", "overlay", "overlay", "-o", f"lowerdir={target},upperdir={upper},workdir={work}", str(target))


def enter_namespace() -> None:
    """Runs inside `unshare -m`: the overlays, a bpffs, a home for 'you',
    and a Go build cache of its own (Go keys a cgo package's build without
    pkg-config's answer: flags that name /usr/local or /home/you here would
    be reused outside, where those paths hold no libperfbuf)."""
    real = SCRATCH / "real"
    real.mkdir(parents=True)
    mount("--bind", str(REPO), str(real))  # the repository as it is, for target/
    overlay(REPO, "repo")
    mount("--bind", str(real / "target"), str(REPO / "target"))
    for path, name in ((Path("/usr/local"), "usr-local"), (Path("/etc"), "etc"), (Path("/home"), "home")):
        overlay(path, name)
    HOME.mkdir(parents=True, exist_ok=True)
    Path("/sys/fs/bpf").mkdir(exist_ok=True)
    mount("-t", "bpf", "bpf", "/sys/fs/bpf")
    os.chdir(REPO)
    os.environ["GOCACHE"] = str(REPO / "target/docs/go-build")


# ---- sessions: shell blocks in order ------------------------------------------------

# Where each session's blocks start, and what it has before the first (the
# environment a reader of that README has: the build done, root).
def sessions() -> dict[str, dict]:
    cache = {k: os.environ[k] for k in ("CARGO_HOME", "RUSTUP_HOME") if k in os.environ}
    real_home = os.environ.get("HOME", "/root")
    cache.setdefault("CARGO_HOME", f"{real_home}/.cargo")
    cache.setdefault("RUSTUP_HOME", f"{real_home}/.rustup")
    gopaths = subprocess.run(["go", "env", "GOMODCACHE", "GOPATH"], capture_output=True, text=True)
    go_env = dict(zip(("GOMODCACHE", "GOPATH"), gopaths.stdout.split()))
    you = {"HOME": str(HOME), **cache, **go_env, "XDG_CACHE_HOME": f"{real_home}/.cache"}
    scratch = SCRATCH / "cwd"
    return {
        # README.md
        "install": {"cwd": REPO, "env": you},
        "trace": {"cwd": REPO},
        "c-example": {"cwd": REPO},
        "preload": {"cwd": scratch, "setup": f"cc -O2 -Wall -Werror -o tool {REPO}/tests/docs/tool.c -lbpf"},
        "record": {"cwd": REPO, "setup": "make --no-print-directory -s build/record build/spinner >/dev/null"},
        # bindings/python/README.md (and README.md's pip lines)
        "python": {"cwd": REPO},
        # bindings/go/README.md
        "go-static": {"cwd": REPO / "bindings/go/examples/switch"},
        # your checkout at ~/src/perfbuf, your module at ~/mod (a program
        # that imports perfbuf.dev/perfbuf), a make install in ~/.local
        "go-depend": {
            "cwd": HOME / "src/perfbuf",
            "env": you,
            "setup": f"mkdir -p {HOME}/src {HOME}/mod && ln -sfn {REPO} {HOME}/src/perfbuf && "
                     f"cd {HOME}/mod && go mod init example.com/you >/dev/null 2>&1 && "
                     f"printf '{GO_CONSUMER}' > main.go && "
                     f"make -C {REPO} --no-print-directory install PREFIX={HOME}/.local >/dev/null",
        },
        "go-cilium": {"cwd": HOME / "cilium", "env": you, "setup": f"mkdir -p {HOME}/cilium && cd {HOME}/cilium && "
                      "go mod init example.com/tool >/dev/null 2>&1"},
        "go-examples": {"cwd": REPO},
    }


GO_CONSUMER = ('package main\\n\\nimport (\\n\\t"fmt"\\n\\n\\t"perfbuf.dev/perfbuf"\\n)\\n\\n'
               'func main() { fmt.Println(perfbuf.ErrClosed) }\\n')


def run_sessions(blocks: list[Block]) -> None:
    defs = sessions()
    names = []
    for b in blocks:
        if b.kind in ("run", "file") and b.args[0] not in names:
            names.append(b.args[0])
    for name in names:
        d = defs[name]
        mine = [b for b in blocks if b.kind in ("run", "file") and b.args[0] == name]
        env = dict(os.environ, **d.get("env", {}))
        if str(d["cwd"]).startswith(str(SCRATCH)):
            Path(d["cwd"]).mkdir(parents=True, exist_ok=True)
        if d.get("setup"):
            r = subprocess.run(["bash", "-c", d["setup"]], cwd=d["cwd"] if Path(d["cwd"]).exists() else "/",
                               env=env, capture_output=True, text=True)
            if r.returncode:
                for b in mine:
                    b.error = f"session {name}'s set-up failed: {r.stdout}{r.stderr}"
                continue
        for b in mine:
            if b.kind == "file":
                (Path(d["cwd"]) / b.args[1]).write_text(b.text)
        script = ["set -eu -o pipefail"]
        runs = [b for b in mine if b.kind == "run"]
        for i, b in enumerate(runs):
            cwd = b.option("cwd", shlex.quote(str(d["cwd"])))  # $HOME: the session's
            script += [f"echo '@@docs-test {i}@@'", f"cd {cwd}", b.text]
        script.append(f"echo '@@docs-test {len(runs)}@@'")
        r = subprocess.run(["bash", "-c", "\n".join(script)], cwd=d["cwd"], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=1800)
        parts = re.split(r"^@@docs-test (\d+)@@\n", r.stdout, flags=re.M)
        done = {int(parts[k]): parts[k + 1] for k in range(1, len(parts) - 1, 2)}
        for i, b in enumerate(runs):
            b.output = done.get(i, "")
            if i + 1 not in done:
                b.error = f"exit {r.returncode} in session {name}:\n{b.output[-3000:]}" if i in done else \
                    f"not reached: an earlier block of session {name} failed"


def shape(line: str) -> str:
    """A line with its numbers (and 2K, 5.09%, 0x1f) as N: what stays the same between runs."""
    return re.sub(r"(0x[0-9a-f]+|\d+(\.\d+)?[KMG]?)", "N", line.strip())


def check_holds(block: Block) -> None:
    path = Path(block.args[1].replace("$HOME", str(HOME)))
    lines = set(path.read_text().splitlines()) if path.exists() else set()
    missing = [x for x in block.text.splitlines() if x.strip() and x not in lines]
    if missing:
        block.error = f"{path} lacks {missing}:\n" + (path.read_text() if path.exists() else "(no such file)")


def check_output(block: Block, blocks: list[Block]) -> None:
    before = [b for b in blocks if b.kind == "run" and b.args[0] == block.args[0] and
              (b.doc, b.line) < (block.doc, block.line)]
    if not before:
        block.error = "no run block of that session above it"
        return
    ran = before[-1]
    if ran.error:
        block.error = f"its command failed ({ran.where})"
        return
    got = {shape(x) for x in ran.output.splitlines()}
    missing = [x for x in block.text.splitlines() if x.strip() and x.strip() != "..." and shape(x) not in got]
    if missing:
        block.error = f"lines the command ({ran.where}) did not print: {missing}\nit printed:\n{ran.output}"


# ---- C fragments ---------------------------------------------------------------------

C_INCLUDES = """#define _GNU_SOURCE
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <perfbuf.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
"""

# The declarations a fragment assumes, and the function it is the body of.
CONTEXTS_C = {
    # README's tracing monitor: from examples/execmon.c.
    "execmon": ("struct monitor { struct perfbuf_events *set; int exec_event; };\n"
                "static volatile sig_atomic_t stop;\n", "", ""),
    # README's profiler: the program's fd from libbpf.
    "profile": ("", "void profile(struct bpf_program *prog)\n{\n", "}\n"),
    # README's perf.data writer: examples/record.c's events, callback, child.
    "record": ("static enum bpf_perf_event_ret ignore(void *ctx, int cpu, struct perf_event_header *rec)\n"
               "{\n\t(void)ctx, (void)cpu, (void)rec;\n\treturn LIBBPF_PERF_EVENT_CONT;\n}\n",
               "void record(struct perfbuf_events_opts opts, struct perfbuf_event_desc clock,\n"
               "\t    struct perfbuf_event_desc sched_switch, pid_t child)\n{\n\tint status;\n", "}\n"),
}


def check_c(block: Block) -> None:
    before, head, tail = CONTEXTS_C[block.args[0]]
    body = textwrap.indent(block.text, "\t") if head else block.text
    src = SCRATCH / f"c-{block.line}.c"
    src.write_text(C_INCLUDES + before + head + body + tail)
    r = subprocess.run(["cc", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-Wno-unused-function",
                        "-Wno-unused-parameter", f"-I{REPO}/include", "-c", "-o", "/dev/null", str(src)],
                       capture_output=True, text=True)
    if r.returncode:
        block.error = r.stderr


# ---- BPF programs --------------------------------------------------------------------

CONTEXTS_BPF = {
    # README's counted output: the record the program fills.
    "counted": "struct event {\n\tint pid;\n};\n",
}


def check_bpf(block: Block) -> None:
    src = SCRATCH / f"bpf-{block.line}.c"
    src.write_text(CONTEXTS_BPF[block.args[0]] + block.text)
    arch = subprocess.run(["gcc", "-print-multiarch"], capture_output=True, text=True).stdout.strip()
    r = subprocess.run(["clang", "-O2", "-g", "-target", "bpf", "-Wall", "-Werror", f"-I/usr/include/{arch}",
                        f"-I{REPO}/include", "-c", "-o", "/dev/null", str(src)],
                       capture_output=True, text=True)
    if r.returncode:
        block.error = r.stderr


# ---- Rust ----------------------------------------------------------------------------

# Each fragment is the body of a function of the crate's main.rs: what it
# takes, and whether main runs it (a reader that polls forever does not).
CONTEXTS_RUST = {
    # a set with an event, a running command
    "perfdata": ("fn perfdata() -> Result<(), Box<dyn std::error::Error>> {\n"
                 "    let mut set = perfbuf::events::EventSet::builder().build()?;\n"
                 "    set.add(&perfbuf::events::Event::tracepoint(\"sched:sched_process_exec\"))?;\n"
                 "    let mut child = std::process::Command::new(\"/bin/true\").spawn()?;\n",
                 "    Ok(())\n}\n", True),
    # a map (any AsFd): the builder's reader polls forever, built only
    "map": ("fn builder(map: std::os::fd::OwnedFd) -> Result<(), Box<dyn std::error::Error>> {\n", "}\n", False),
    # an OwnedFd of a PERF_EVENT_ARRAY, in a tokio runtime
    "async": ("fn async_reader() -> Result<(), Box<dyn std::error::Error>> {\n"
              "    let producer = producer::Producer::open()?;\n"
              "    let map_fd = producer.map().try_clone_to_owned()?;\n"
              "    let rt = tokio::runtime::Runtime::new()?;\n"
              "    let _guard = rt.enter();\n",
              "    Ok(())\n}\n", True),
    # two BPF ring buffers (BPF_MAP_TYPE_RINGBUF) of the test producer
    "ringbuf": ("fn ringbuf() -> Result<(), Box<dyn std::error::Error>> {\n"
                "    let (a, b) = (producer::RingbufProducer::open(4096)?, producer::RingbufProducer::open(4096)?);\n"
                "    let (events, errors) = (a.map(), b.map());\n",
                "    Ok(())\n}\n", True),
    # an exec to see
    "events": ("fn events() -> Result<(), Box<dyn std::error::Error>> {\n"
               "    std::thread::spawn(|| {\n"
               "        std::thread::sleep(std::time::Duration::from_millis(300));\n"
               "        let _ = std::process::Command::new(\"/bin/true\").status();\n"
               "    });\n",
               "    Ok(())\n}\n", True),
}


def check_rust(blocks: list[Block]) -> None:
    mine = [b for b in blocks if b.kind == "rust"]
    tomls = [b for b in blocks if b.kind == "toml"]
    if not mine and not tomls:
        return
    app = SCRATCH / "rust" / "app"
    (app / "src").mkdir(parents=True)
    (SCRATCH / "rust" / "perfbuf").symlink_to(REPO)  # the dependency block's ../perfbuf
    deps = "".join(b.text for b in tomls)
    (app / "Cargo.toml").write_text(
        "[package]\nname = \"readme-blocks\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n"
        "[workspace]\n\n" + deps +
        # the contexts': a runtime, and libc for the test producer
        "tokio = { version = \"1\", default-features = false, features = [\"rt\", \"rt-multi-thread\"] }\n"
        "libc = \"0.2\"\n")
    shutil.copy(REPO / "Cargo.lock", app / "Cargo.lock")
    fns, calls = [], []
    for b in mine:
        head, tail, run = CONTEXTS_RUST[b.args[0]]
        fns.append(f"// {b.where}\n" + head + textwrap.indent(b.text, "    ") + tail)
        if run:
            name = head.split("fn ", 1)[1].split("(", 1)[0]
            calls.append(f"    (\"{b.where}\", {name}()),")
    (app / "src/main.rs").write_text(
        "#![allow(unused, unreachable_code, clippy::all)]\n"
        f"#[path = \"{REPO}/examples/support/producer.rs\"]\nmod producer;\n\n" + "\n".join(fns) +
        "\nfn main() {\n    let mut failed = false;\n    for (block, result) in [\n" + "\n".join(calls) +
        "\n    ] {\n        if let Err(e) = result {\n            eprintln!(\"{block}: {e}\");\n"
        "            failed = true;\n        }\n    }\n    std::process::exit(failed as i32);\n}\n")
    target = REPO / "target" / "docs"
    r = subprocess.run(["cargo", "build", "--release", "--quiet", "--features", "perfbuf/tokio",
                        "--target-dir", str(target)], cwd=app, capture_output=True, text=True)
    if r.returncode:
        for b in mine + tomls:
            b.error = f"cargo build of the blocks: {r.stderr[-4000:]}"
        return
    env = dict(os.environ, PERFBUF_PRODUCER_LIB=str(REPO / "build/libperfbuf_producer.so"))
    r = subprocess.run([str(target / "release/readme-blocks")], cwd=SCRATCH, env=env, capture_output=True,
                       text=True, timeout=120)
    for b in mine:
        bad = [x for x in r.stderr.splitlines() if x.startswith(b.where + ":")]
        if bad:
            b.error = "\n".join(bad)
        elif r.returncode and not any(x.startswith(c.where + ":") for c in mine for x in r.stderr.splitlines()):
            b.error = f"the blocks' program: exit {r.returncode}: {r.stderr[-2000:]}"


def check_rust_interop(block: Block) -> None:
    """The block as a program of each tests/interop/PROJECT's crate (its
    lock and target directory, built by make interop-test), run in build/
    where exec_events.bpf.o is."""
    for p in block.args[0].split(","):
        interop_program(block, p)
        if block.error:
            block.error = f"{p}: {block.error}"
            return


def interop_program(block: Block, which: str) -> None:
    project = REPO / "tests/interop" / which
    name = "perfbuf-docs-" + which.replace("/", "-").replace(".", "-")
    src = project / f"readme-block-{name}.rs"
    src.write_text("#![allow(unused)]\nfn main() -> Result<(), Box<dyn std::error::Error>> {\n" +
                   textwrap.indent(block.text, "    ") + "    Ok(())\n}\n")
    rel = os.path.relpath(src, project)
    with open(project / "Cargo.toml", "a") as f:
        f.write(f"\n[[bin]]\nname = \"{name}\"\npath = \"{rel}\"\n")
    target = REPO / "target/interop"
    r = subprocess.run(["cargo", "build", "--release", "--quiet", "--bin", name, "--target-dir", str(target)],
                       cwd=project, capture_output=True, text=True)
    if r.returncode:
        block.error = f"cargo build: {r.stderr[-4000:]}"
        return
    r = subprocess.run([str(target / "release" / name)], cwd=REPO / "build", capture_output=True, text=True,
                       timeout=60)
    if r.returncode:
        block.error = f"exit {r.returncode}: {r.stdout}{r.stderr}"


# ---- Python --------------------------------------------------------------------------

FIXTURES = f"import sys\nsys.path.insert(0, {str(REPO / 'tests/docs')!r})\nimport fixtures\n"

# What each block takes from its surroundings, and what follows it.
CONTEXTS_PYTHON = {
    # README's example: run as a program with MAP_FD (see check_python)
    "map-fd-program": ("", ""),
    # a map pinned at /sys/fs/bpf/events, the example's on_sample, and done once records came
    "pinned": (FIXTURES + "import os\nproducer = fixtures.Producer()\n"
               "fixtures.pin(producer.map_fd, '/sys/fs/bpf/events')\n"
               "def on_sample(cpu, data):\n    print(f'cpu {cpu}: {len(data)} bytes')\n"
               "done = False\n"
               "def finish():\n    global done\n    done = True\n"
               "fixtures.later(0.5, producer.emit, finish)\n", ""),
    # a map with 5 records coming, and a handler that ends the loop after them
    "pull": (FIXTURES + "from perfbuf import PerfBuffer\nproducer = fixtures.Producer()\nmap_fd = producer.map_fd\n"
             "class Enough(Exception):\n    pass\nseen = []\n"
             "def handle(cpu, data):\n    seen.append(data)\n    if len(seen) == 5:\n        raise Enough\n"
             "fixtures.later(0.5, producer.emit)\ntry:\n", "except Enough:\n    print('5 records')\n"),
    # a map with 5 records of 16 bytes coming, the example's handle, and NumPy (the batch blocks)
    "batch": (FIXTURES + "producer = fixtures.Producer()\nmap_fd = producer.map_fd\n"
              "def handle(cpu, data):\n    print('cpu', cpu, bytes(data).hex())\n"
              "fixtures.later(0.5, producer.emit)\n", ""),
    # a buffer over a map
    "ring": (FIXTURES + "import struct\nfrom perfbuf import PerfBuffer\nproducer = fixtures.Producer()\n"
             "pb = PerfBuffer(producer.map_fd)\n", "assert head == 0 and tail == 0\n"),
    # a BPF ring buffer (map_fd) that gets 5 records half a second later
    "ringbuf": (FIXTURES + "producer = fixtures.RingProducer()\nmap_fd = producer.map_fd\n"
                "fixtures.later(0.5, producer.emit)\n", ""),
    # execs to see, and done once they came
    "execs": (FIXTURES + "done = False\ndef finish():\n    global done\n    done = True\n"
              "fixtures.later(0.3, fixtures.exec_true, finish)\n", ""),
    # the profiler's program
    "prog": (FIXTURES + "from perfbuf import EventSet\n"
             "prog_fd = fixtures.bpf_program('build/profile.bpf.o', 'on_sample')\n", ""),
    # a sample of this process's CPU clock for the function defined
    "sample-fields": ("", "from perfbuf import EventSet\nimport os\n"
                      "with EventSet(pids=[os.getpid()]) as s:\n"
                      "    s.add_software('cpu-clock', period=100000)\n"
                      "    with s.reader(on_sample) as r:\n"
                      "        s.enable()\n"
                      "        n = sum(range(3000000))\n"
                      "        s.disable()\n"
                      "        r.consume()\n"),
    # nothing: the block is a program
    "none": ("", ""),
}


def check_python(block: Block) -> None:
    before, after = CONTEXTS_PYTHON[block.args[0]]
    body = textwrap.indent(block.text, "    ") if before.endswith("try:\n") else block.text
    env = dict(os.environ, PYTHONPATH=str(REPO / "bindings/python/src"),
               PERFBUF_LIBRARY=str(REPO / "target/release/libperfbuf.so"),
               PERFBUF_PRODUCER_LIBRARY=str(REPO / "build/libperfbuf_producer.so"))
    cwd = SCRATCH / "python"
    cwd.mkdir(exist_ok=True)
    if block.args[0] == "map-fd-program":
        # A program reading MAP_FD until Ctrl-C: records come, then SIGINT.
        sys.path.insert(0, str(REPO / "tests/docs"))
        os.environ["PERFBUF_PRODUCER_LIBRARY"] = env["PERFBUF_PRODUCER_LIBRARY"]
        import fixtures
        producer = fixtures.Producer()
        p = subprocess.Popen([sys.executable, "-c", block.text], env=dict(env, MAP_FD=str(producer.map_fd)),
                             pass_fds=(producer.map_fd,), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
        time.sleep(1.5)
        producer.emit(5)
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=30)
        if p.returncode != 0 or len(re.findall(r"^cpu 0: \d+ bytes [0-9a-f]+$", out, re.M)) != 5:
            block.error = f"exit {p.returncode}, 5 records wanted:\n{out}{err}"
        return
    src = cwd / f"block-{block.line}.py"
    src.write_text(before + body + after)
    r = subprocess.run([sys.executable, str(src)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    if r.returncode:
        block.error = f"exit {r.returncode}:\n{r.stdout}{r.stderr}"


# ---- Go ------------------------------------------------------------------------------

# The frame of each fragment: imports, and what comes before and after it
# in the function it is the body of.
CONTEXTS_GO = {
    "eventset": (["fmt", "log", "perfbuf.dev/perfbuf"], "", ""),
    "profiler": (["fmt", "github.com/cilium/ebpf", "perfbuf.dev/perfbuf"], "var coll *ebpf.Collection\n", ""),
    "sideband": (["fmt", "perfbuf.dev/perfbuf"], "var rd *perfbuf.EventReader\n", "_ = set\n"),
    "perfdata": (["log", "time", "perfbuf.dev/perfbuf"], "running := false\n", ""),
}

GO_MOD = f"""module example.com/readme

go 1.19

require (
	github.com/cilium/ebpf v0.9.1
	perfbuf.dev/perfbuf v0.0.0-00010101000000-000000000000
)

require golang.org/x/sys v0.0.0-20210906170528-6f6e22806c34 // indirect

replace perfbuf.dev/perfbuf => {REPO}/bindings/go

replace (
	github.com/cilium/ebpf => /usr/share/gocode/src/github.com/cilium/ebpf
	golang.org/x/sys => /usr/share/gocode/src/golang.org/x/sys
)
"""


def check_go(blocks: list[Block]) -> None:
    mine = [b for b in blocks if b.kind == "go"]
    if not mine:
        return
    mod = SCRATCH / "go"
    mod.mkdir()
    (mod / "go.mod").write_text(GO_MOD)
    (mod / "main.go").write_text("package main\n\nfunc main() {}\n")
    for b in mine:
        imports, before, after = CONTEXTS_GO[b.args[0]]
        (mod / f"block{b.line}.go").write_text(
            f"// {b.where}\npackage main\n\nimport (\n" + "".join(f"\t{q!r}\n".replace("'", '"') for q in imports) +
            f")\n\nfunc block{b.line}() {{\n" + textwrap.indent(before + b.text + after, "\t") + "}\n")
    env = dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off", GOWORK="off")
    for cmd in (["go", "vet", "./..."], ["go", "build", "-o", "/dev/null", "."]):
        r = subprocess.run(cmd, cwd=mod, env=env, capture_output=True, text=True)
        if r.returncode:
            for b in mine:
                mentions = [x for x in r.stderr.splitlines() if f"block{b.line}.go" in x]
                if mentions or not any("block" in x for x in r.stderr.splitlines()):
                    b.error = f"{' '.join(cmd)}:\n" + ("\n".join(mentions) or r.stderr)
            return


# ---- main ----------------------------------------------------------------------------

def main() -> int:
    blocks, problems = [], []
    for doc in DOCS:
        b, p = parse(doc)
        blocks += b
        problems += p
    if "--list" in sys.argv:
        for b in blocks:
            print(f"{b.where}: {b.kind} {' '.join(b.args)}")
        return 0
    for p in problems:
        print(f"docs-test: FAILED: {p}")
    if os.geteuid() != 0:
        why = "the blocks run commands as root (BPF, perf events, make install) in a mount namespace"
        if CI:
            print(f"docs-test: FAILED: {why}, and this is not root (CI=true)")
            return 1
        print(f"skip: docs-test: {len(blocks)} blocks: {why}")
        return 0
    if os.environ.get("DOCS_TEST_INSIDE") != "1":
        if SCRATCH.exists():
            shutil.rmtree(SCRATCH)
        SCRATCH.mkdir(parents=True)
        env = dict(os.environ, DOCS_TEST_INSIDE="1")
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, __file__, *sys.argv[1:]],
                           env=env)
        shutil.rmtree(SCRATCH, ignore_errors=True)
        return r.returncode
    enter_namespace()

    run_sessions(blocks)
    for b in blocks:
        try:
            if b.kind == "output":
                check_output(b, blocks)
            elif b.kind == "holds":
                check_holds(b)
            elif b.kind == "c":
                check_c(b)
            elif b.kind == "bpf":
                check_bpf(b)
            elif b.kind == "python":
                check_python(b)
            elif b.kind == "rust-interop":
                check_rust_interop(b)
        except Exception as e:  # a broken check is a failure of its block
            b.error = f"{type(e).__name__}: {e}"
    check_rust(blocks)
    check_go(blocks)

    passed = failed = 0
    for b in blocks:
        what = f"{b.where} ({b.lang or 'plain'}, {b.kind} {' '.join(b.args)})".rstrip()
        if b.kind in ("text", "not-run"):
            print(f"docs-test: {'not run: ' + ' '.join(b.args) if b.kind == 'not-run' else 'not code'}: {b.where}")
        elif b.error:
            failed += 1
            print(f"docs-test: FAILED: {what}:\n{textwrap.indent(b.error.rstrip(), '    ')}")
        else:
            passed += 1
            print(f"ok   {what}")
    failed += len(problems)
    print(f"docs-test: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
