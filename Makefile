# libperfbuf: build, test and install. `make` builds; `make test` runs
# everything (needs root and BPF for the kernel tests).

PREFIX    ?= /usr/local
LIBDIR    ?= $(PREFIX)/lib
INCDIR    ?= $(PREFIX)/include
BINDIR    ?= $(PREFIX)/bin
CARGO     ?= cargo
CC        ?= cc
CXX       ?= c++
VERSION   := $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
SOMAJOR   := 0

REL       := target/release
LIB       := $(REL)/libperfbuf.so
BUILD     := build
CFLAGS    ?= -O2 -g
WARN      := -Wall -Wextra -Werror
TEST_CFLAGS := $(CFLAGS) $(WARN) -std=gnu11 -Iinclude -Ic-tests
HARNESS   := c-tests/harness.c c-tests/scenarios.c c-tests/producer.c c-tests/testutil.c
HARNESS_H := c-tests/harness.h c-tests/producer.h c-tests/testutil.h
TESTUTIL  := c-tests/producer.c c-tests/testutil.c

PHONY_EXTRA := bench-report-check cli cli-test events-test perfdata-test bench-record sideband-test python-test go-test install-test producer-lib controls-test decode-test examples examples-test bench fault-lib fault-test soak soak-short asan valgrind reliability
.PHONY: docs-test suites-test unified-test batch-read-test accounted-lib accounting-test hotplug-test ringbuf-difftest ringbuf-preload-test ringbuf-linkorder-test interop-test interop-lint tracefs threads-test tsan fuzz-smoke all lib header $(PHONY_EXTRA) test cargo-test rust-examples-test package-check linkorder-test lint c-tests check-exports check-header-compat \
	linked-test difftest preload-test install uninstall clean

all: lib cli

# A check of a recipe that passed, for make test's counts
# (scripts/run-suites.sh reads "pass:" lines with scripts/suite-counts.awk).
pass = @echo "pass: $(1)"

# The C library is the capi/ crate over the Rust core; cargo names its
# outputs libperfbuf_capi.* (so that its rlib and the core's do not
# collide): they are installed, and tested, as libperfbuf.*.
lib:
	$(CARGO) build --release -p perfbuf-capi
	$(call c_names,$(REL))

# The command, perfbuf (cli/: trace, dump, record), over the Rust API.
cli:
	$(CARGO) build --release -p perfbuf-cli

# Its tests on the real kernel (root): trace, dump, --force, SIGINT.
# `make cargo-test` runs them too (cli/ is a workspace member).
cli-test: producer-lib tracefs
	$(CARGO) test $(TEST_PROFILE) -p perfbuf-cli --features $(RUST_FEATURES)

c_names = cp -f $(1)/libperfbuf_capi.so $(1)/libperfbuf.so && cp -f $(1)/libperfbuf_capi.a $(1)/libperfbuf.a && \
	ln -sf libperfbuf.so $(1)/libperfbuf.so.$(SOMAJOR)

# Regenerate include/perfbuf.h from the sources (commit the result).
header:
	PERFBUF_WRITE_HEADER=1 $(CARGO) build --release -p perfbuf-capi

$(BUILD):
	mkdir -p $@

# ---- C harness -------------------------------------------------------------

$(BUILD)/linked_test: c-tests/linked_test.c $(HARNESS) $(HARNESS_H) include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/linked_test.c $(HARNESS) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -ldl

$(BUILD)/preload_test: c-tests/preload_test.c $(HARNESS) $(HARNESS_H) | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/preload_test.c $(HARNESS) -lbpf -ldl

$(BUILD)/difftest: c-tests/difftest.c $(HARNESS) $(HARNESS_H) | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/difftest.c $(HARNESS) -ldl

# The BPF producer as a shared library, for the Python and Go tests.
$(BUILD)/libperfbuf_producer.so: c-tests/producer.c c-tests/producer.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -fPIC -shared -o $@ c-tests/producer.c

producer-lib: $(BUILD)/libperfbuf_producer.so accounted-lib

# The loss identity's BPF program, built with include/perfbuf.bpf.h, and the
# library (libbpf) the Rust, Python and command tests load and run it with.
$(BUILD)/accounted.bpf.o: c-tests/bpf/accounted.bpf.c include/perfbuf.bpf.h | $(BUILD)
	$(BPF_CLANG) -O2 -g -target bpf -I/usr/include/$$(gcc -print-multiarch) -Iinclude -c $< -o $@

$(BUILD)/libperfbuf_accounted.so: c-tests/accounted.c c-tests/accounted.h c-tests/producer.c c-tests/producer.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -fPIC -shared -o $@ c-tests/accounted.c c-tests/producer.c -lbpf

accounted-lib: $(BUILD)/libperfbuf_accounted.so $(BUILD)/accounted.bpf.o

# The loss identity, health and sizing through the C face (root, BPF):
# perfbuf_* and libperfbuf's ring_buffer__* (-lperfbuf before -lbpf, which
# only loads the BPF object).
$(BUILD)/accounting_test: c-tests/accounting_test.c c-tests/accounted.c c-tests/accounted.h $(TESTUTIL) c-tests/testutil.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/accounting_test.c c-tests/accounted.c $(TESTUTIL) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lbpf

accounting-test: $(BUILD)/accounting_test $(BUILD)/accounted.bpf.o
	$(BUILD)/accounting_test $(BUILD)/accounted.bpf.o

$(BUILD)/controls_test: c-tests/controls_test.c $(TESTUTIL) c-tests/testutil.h c-tests/producer.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/controls_test.c $(TESTUTIL) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lpthread

controls-test: $(BUILD)/controls_test
	$(BUILD)/controls_test

# One C API over both channels: perfbuf_new on a perf event array and on a
# BPF ring buffer with the same callbacks; perf_buffer__new still refuses a
# ring buffer as the system libbpf does (dlopened beside).
$(BUILD)/unified_test: c-tests/unified_test.c $(TESTUTIL) c-tests/testutil.h c-tests/producer.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/unified_test.c $(TESTUTIL) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lpthread -ldl

unified-test: $(BUILD)/unified_test
	$(BUILD)/unified_test

# Batch reads through the C API (perfbuf_read_batch, perfbuf_poll_batch).
$(BUILD)/batch_read_test: c-tests/batch_read_test.c $(TESTUTIL) c-tests/testutil.h c-tests/producer.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/batch_read_test.c $(TESTUTIL) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)

batch-read-test: $(BUILD)/batch_read_test
	$(BUILD)/batch_read_test

# Event sets on the real kernel: tracepoints, probes, targets, a profiler.
$(BUILD)/events_test: c-tests/events_test.c c-tests/offset_target.h $(TESTUTIL) c-tests/testutil.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/events_test.c $(TESTUTIL) -lbpf -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lpthread

events-test: $(BUILD)/events_test $(BUILD)/profile.bpf.o tracefs
	$(BUILD)/events_test $(BUILD)/profile.bpf.o

# Side-band records (fork, exec, mmap, exit) through the C face.
$(BUILD)/sideband_test: c-tests/sideband_test.c $(TESTUTIL) c-tests/testutil.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/sideband_test.c $(TESTUTIL) -lbpf -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)

sideband-test: $(BUILD)/sideband_test tracefs
	$(BUILD)/sideband_test

$(BUILD)/probe_args_test: c-tests/probe_args_test.c c-tests/offset_target.h $(TESTUTIL) c-tests/testutil.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/probe_args_test.c $(TESTUTIL) -lbpf -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)

# Probes with fetch arguments (tracefs dynamic events) through the C face.
probe-args-test: $(BUILD)/probe_args_test tracefs
	$(BUILD)/probe_args_test

# Unusual callers (shared maps, own epoll loops, ioctls, forks, low limits,
# slow callbacks, raw readers): each scenario's transcript on libbpf, on
# on libperfbuf's default and on its fast mode (PERFBUF_ADAPTIVE=1, the
# scenarios it supports), compared file by file.
CALLERS := $(BUILD)/callers

$(BUILD)/callers_test: c-tests/callers_test.c $(TESTUTIL) c-tests/testutil.h c-tests/producer.h include/perfbuf.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/callers_test.c $(TESTUTIL) -lbpf -lpthread -ldl

callers-test: $(BUILD)/callers_test lib
	rm -rf $(CALLERS) && mkdir -p $(CALLERS)/libbpf $(CALLERS)/libperfbuf $(CALLERS)/fast
	$(BUILD)/callers_test libbpf $(CALLERS)/libbpf
	LD_PRELOAD=$(CURDIR)/$(LIB) $(BUILD)/callers_test libperfbuf $(CALLERS)/libperfbuf
	PERFBUF_ADAPTIVE=1 LD_PRELOAD=$(CURDIR)/$(LIB) $(BUILD)/callers_test fast $(CALLERS)/fast
	c-tests/compare-transcripts.sh $(CALLERS)/libbpf $(CALLERS)/libperfbuf $(CALLERS)/fast

# ---- reliability ---------------------------------------------------------------

FAULT_REL := target/fault/release

# A separate build with the fault-injection feature (perfbuf_fault_arm).
fault-lib:
	$(CARGO) build --release -p perfbuf-capi --features fault-injection --target-dir target/fault
	$(call c_names,$(FAULT_REL))

$(BUILD)/fault_test: c-tests/fault_test.c $(TESTUTIL) c-tests/testutil.h include/perfbuf.h fault-lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/fault_test.c $(TESTUTIL) -L$(FAULT_REL) -lperfbuf \
		-Wl,-rpath,$(CURDIR)/$(FAULT_REL)

fault-test: $(BUILD)/fault_test
	$(BUILD)/fault_test

$(BUILD)/soak: c-tests/soak.c $(TESTUTIL) c-tests/testutil.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/soak.c $(TESTUTIL) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lpthread

SOAK_SECONDS ?= 60

# Full soak: both CPUs at full speed, a 1-page and a 64-page ring.
soak: $(BUILD)/soak
	$(BUILD)/soak $(SOAK_SECONDS) 1
	$(BUILD)/soak $(SOAK_SECONDS) 64

soak-short: $(BUILD)/soak
	$(BUILD)/soak 3 1
	$(BUILD)/soak 3 64

# The C harness under AddressSanitizer + UBSan (the C side instrumented,
# libperfbuf loaded as built), and a check that the runtime is linked in.
ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

$(BUILD)/linked_test_asan: c-tests/linked_test.c $(HARNESS) $(HARNESS_H) include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) $(ASAN_FLAGS) -o $@ c-tests/linked_test.c $(HARNESS) -L$(REL) -lperfbuf \
		-Wl,-rpath,$(CURDIR)/$(REL) -ldl

$(BUILD)/controls_test_asan: c-tests/controls_test.c $(TESTUTIL) include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) $(ASAN_FLAGS) -o $@ c-tests/controls_test.c $(TESTUTIL) -L$(REL) -lperfbuf \
		-Wl,-rpath,$(CURDIR)/$(REL) -lpthread

asan: $(BUILD)/linked_test_asan $(BUILD)/controls_test_asan
	nm $(BUILD)/linked_test_asan | grep -q __asan_init && nm $(BUILD)/linked_test_asan | grep -q __ubsan_handle
	$(call pass,AddressSanitizer and UBSan runtimes are linked in)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 $(BUILD)/linked_test_asan
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 $(BUILD)/controls_test_asan

# The harness under valgrind memcheck: no errors, no definite leaks.
VALGRIND := valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
	--show-leak-kinds=definite --suppressions=c-tests/valgrind.supp -q

valgrind: $(BUILD)/linked_test $(BUILD)/controls_test $(BUILD)/threads_test
	$(VALGRIND) $(BUILD)/linked_test
	$(VALGRIND) $(BUILD)/controls_test
	$(VALGRIND) $(BUILD)/threads_test

# The threading contract from several threads; then under ThreadSanitizer
# with libperfbuf and std instrumented (nightly, -Zbuild-std).
$(BUILD)/threads_test: c-tests/threads_test.c $(TESTUTIL) c-tests/testutil.h c-tests/producer.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/threads_test.c $(TESTUTIL) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lpthread

threads-test: $(BUILD)/threads_test
	$(BUILD)/threads_test

tsan:
	scripts/tsan.sh

# Coverage-guided fuzzing (libFuzzer + ASan, nightly) of the ring reader and
# the decoder from the checked-in seed corpus: FUZZ_SECONDS per target.
FUZZ_SECONDS ?= 10
fuzz-smoke:
	FUZZ_SECONDS=$(FUZZ_SECONDS) scripts/fuzz-smoke.sh

reliability: fault-test soak-short asan valgrind threads-test tsan fuzz-smoke

# ---- benchmark ---------------------------------------------------------------

$(BUILD)/perfbench: bench/perfbench.c bench/rings.c bench/rings.h c-tests/producer.c c-tests/producer.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -Ibench -o $@ bench/perfbench.c bench/rings.c c-tests/producer.c -lbpf -lpthread -ldl

BENCH_REPS ?= 5
BENCH_ROWS ?= drain,stream,ringbuf,peers,python,quiet,latency,rings,record

# The peers' producer as a library, for the Python rows (bench/python_rows.py).
$(BUILD)/libperfbuf_peer_producer.so: bench/peers/peer_producer.c bench/peers/peer_producer.h c-tests/producer.c c-tests/producer.h | $(BUILD)
	$(CC) $(TEST_CFLAGS) -fPIC -shared -o $@ bench/peers/peer_producer.c c-tests/producer.c

# The peer readers over the same producer: cilium/ebpf (Go, Debian's
# golang-github-cilium-ebpf-dev) and aya (Rust, crates.io). Each one whose
# toolchain or sources are missing is skipped, with the reason printed.
.PHONY: bench-peers
bench-peers: | $(BUILD)
	bench/peers/build.sh $(BUILD)

# The same binary on libbpf and on libperfbuf (LD_PRELOAD), alternating;
# the BPF ring buffer and the peer readers on the same producer; medians
# with spread and ratios. The raw results go to docs/bench.json, beside the
# plot, and README's and docs/performance.md's tables are generated from it
# (bench-report-check, in make test, fails when they differ).
bench: $(BUILD)/perfbench lib bench-peers producer-lib $(BUILD)/libperfbuf_peer_producer.so tracefs
	$(CARGO) build --release --example ring_scale --example record_bench
	$(CARGO) build --release -p perfbuf-capi --features bench-health-off --target-dir target/health-off
	python3 bench/run.py $(BUILD)/perfbench $(CURDIR)/$(LIB) docs/bench.json --reps $(BENCH_REPS) \
		--health-off-lib $(CURDIR)/target/health-off/release/libperfbuf_capi.so \
		--rows $(BENCH_ROWS) --peers-dir $(BUILD) --python-producer $(BUILD)/libperfbuf_peer_producer.so --ring-scale $(CURDIR)/$(REL)/examples/ring_scale \
		--record-bench $(CURDIR)/$(REL)/examples/record_bench
	@python3 -c "import matplotlib" 2>/dev/null || pip install -q matplotlib
	python3 bench/plot.py docs/bench.json docs/bench.png
	python3 bench/report.py docs/bench.json --update README.md docs/performance.md

bench-report-check:
	python3 bench/report.py docs/bench.json --check README.md docs/performance.md
	$(call pass,README's and docs/performance.md's tables are docs/bench.json's)

# The recording rows alone, printed as a table (make bench has them too):
# a syscall tracepoint read only, into perf.data, and by perf record.
bench-record: tracefs
	$(CARGO) build --release --example record_bench
	$(REL)/examples/record_bench 3

# ---- examples ----------------------------------------------------------------

EXAMPLE_SRC := examples/stream.c c-tests/producer.c
EXAMPLE_CFLAGS := $(TEST_CFLAGS) -Iexamples

$(BUILD)/ordered_reader: examples/ordered_reader.c $(EXAMPLE_SRC) examples/stream.h | $(BUILD)
	$(CC) $(EXAMPLE_CFLAGS) -o $@ examples/ordered_reader.c $(EXAMPLE_SRC) -lbpf -lpthread

$(BUILD)/ordered_builtin: examples/ordered_builtin.c $(EXAMPLE_SRC) examples/stream.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(EXAMPLE_CFLAGS) -o $@ examples/ordered_builtin.c $(EXAMPLE_SRC) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lpthread

# The BPF program of the examples (and of the Python and Go examples).
BPF_CLANG ?= clang
$(BUILD)/%.bpf.o: examples/bpf/%.bpf.c | $(BUILD)
	$(BPF_CLANG) -O2 -g -target bpf -I/usr/include/$$(gcc -print-multiarch) -c $< -o $@

# README's example: loaded with libbpf, read with libperfbuf; linked in
# both orders (through perfbuf_* names it runs on libperfbuf either way).
$(BUILD)/exec_events: examples/exec_events.c include/perfbuf.h lib | $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -Iinclude -o $@ $< -lbpf -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)
	$(CC) $(CFLAGS) $(WARN) -Iinclude -o $@_perfbuf_first $< -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lbpf

# Event sets: a tracing monitor without BPF, and a profiler whose BPF
# program counts samples per CPU.
$(BUILD)/execmon: examples/execmon.c include/perfbuf.h lib | $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -Iinclude -o $@ $< -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)

$(BUILD)/record: examples/record.c include/perfbuf.h lib | $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -Iinclude -o $@ $< -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)

$(BUILD)/profile: examples/profile.c include/perfbuf.h lib | $(BUILD)
	$(CC) $(CFLAGS) $(WARN) -Iinclude -o $@ $< -lbpf -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL) -lpthread

EXAMPLES := $(BUILD)/ordered_reader $(BUILD)/ordered_builtin $(BUILD)/exec_events $(BUILD)/exec_events.bpf.o \
	$(BUILD)/execmon $(BUILD)/profile $(BUILD)/profile.bpf.o $(BUILD)/record
examples: $(EXAMPLES)

# Both CPUs producing, then one idle; the raw-region merge on libbpf and on
# libperfbuf (LD_PRELOAD), the built-in one with a 1-page and a large ring.
examples-test: examples tracefs
	awk '/^```c$$/ { n++; next } /^```$$/ && n == 1 { exit } n == 1' README.md > $(BUILD)/readme_example.c
	tail -n +4 examples/exec_events.c | diff $(BUILD)/readme_example.c - # README shows the file it names
	$(call pass,README's C example is examples/exec_events.c)
	$(BUILD)/exec_events $(BUILD)/exec_events.bpf.o
	$(call pass,exec_events linked -lbpf first)
	$(BUILD)/exec_events_perfbuf_first $(BUILD)/exec_events.bpf.o
	$(call pass,exec_events linked -lperfbuf first)
	cp /bin/true $(MARK)
	$(BUILD)/execmon -f 'filename ~ "*/perfbuf-mark-true"' sh -c '$(MARK); /bin/echo not shown; $(MARK)' > $(BUILD)/execmon.out
	test "$$(grep -c ' exec $(MARK)$$' $(BUILD)/execmon.out)" = 2 && ! grep -q echo $(BUILD)/execmon.out
	$(call pass,execmon with a filter)
	$(BUILD)/profile $(BUILD)/profile.bpf.o 0.5
	$(call pass,profile)
	$(BUILD)/ordered_reader 20000 20000
	LD_PRELOAD=$(CURDIR)/$(LIB) $(BUILD)/ordered_reader 20000 20000
	$(BUILD)/ordered_reader 20000 0
	LD_PRELOAD=$(CURDIR)/$(LIB) $(BUILD)/ordered_reader 0 20000
	$(call pass,ordered_reader on libbpf and libperfbuf)
	$(BUILD)/ordered_builtin 20000 20000 1
	$(BUILD)/ordered_builtin 0 20000 1
	$(BUILD)/ordered_builtin 50000 50000 64
	$(call pass,ordered_builtin with a 1-page and a 64-page ring)

# The C perf.data example on a program spinning in a known function:
# perf report puts the function first for the program, under its name;
# perf script has its one exec and exit; every record written is read.
$(BUILD)/spinner: tests/perfdata/spinner.c | $(BUILD)
	$(CC) -O1 -g -fno-omit-frame-pointer -o $@ $<

perfdata-test: $(BUILD)/record $(BUILD)/spinner tracefs
	$(BUILD)/record -o $(BUILD)/record.data $(BUILD)/spinner 1.0 2> $(BUILD)/record.log || { cat $(BUILD)/record.log; exit 1; }
	tests/perfdata/check-record.sh $(BUILD)/record.data $(BUILD)/record.log

$(BUILD)/decode_test: c-tests/decode_test.c $(TESTUTIL) c-tests/testutil.h include/perfbuf.h lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -fno-omit-frame-pointer -o $@ c-tests/decode_test.c $(TESTUTIL) -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)

decode-test: $(BUILD)/decode_test
	$(BUILD)/decode_test

# ---- language packages -------------------------------------------------------

python-test: lib producer-lib $(BUILD)/exec_events.bpf.o $(BUILD)/profile.bpf.o tracefs
	bindings/python/run-tests.sh

go-test: lib accounted-lib $(BUILD)/exec_events.bpf.o $(BUILD)/profile.bpf.o tracefs
	bindings/go/run-tests.sh

linked-test: $(BUILD)/linked_test
	$(BUILD)/linked_test

difftest: $(BUILD)/difftest lib
	rm -rf $(BUILD)/transcripts && mkdir -p $(BUILD)/transcripts
	$(BUILD)/difftest $(CURDIR)/$(LIB) $(BUILD)/transcripts

# The same libbpf-built binary, plain and under LD_PRELOAD: it must be served
# by libperfbuf in the second run and observe exactly the same things.
preload-test: $(BUILD)/preload_test lib
	$(BUILD)/preload_test libbpf $(BUILD)/preload.libbpf.txt
	LD_PRELOAD=$(CURDIR)/$(LIB) $(BUILD)/preload_test libperfbuf $(BUILD)/preload.libperfbuf.txt
	diff -u $(BUILD)/preload.libbpf.txt $(BUILD)/preload.libperfbuf.txt
	@echo "pass: preload: transcripts identical ($$(wc -l < $(BUILD)/preload.libbpf.txt) lines)"

# The ring buffer's differential suite: every ring_buffer__* scenario through
# the system libbpf and libperfbuf (dlopened side by side), transcripts
# compared; and a -lbpf program plainly and under LD_PRELOAD.
RB_HARNESS := c-tests/rb_harness.c c-tests/rb_scenarios.c $(HARNESS)
RB_HARNESS_H := c-tests/rb_harness.h $(HARNESS_H)

$(BUILD)/rb_difftest: c-tests/rb_difftest.c $(RB_HARNESS) $(RB_HARNESS_H) | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/rb_difftest.c $(RB_HARNESS) -ldl

$(BUILD)/rb_preload_test: c-tests/rb_preload_test.c $(RB_HARNESS) $(RB_HARNESS_H) | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $@ c-tests/rb_preload_test.c $(RB_HARNESS) -lbpf -ldl

ringbuf-difftest: $(BUILD)/rb_difftest lib
	rm -rf $(BUILD)/rb_transcripts && mkdir -p $(BUILD)/rb_transcripts
	$(BUILD)/rb_difftest $(CURDIR)/$(LIB) $(BUILD)/rb_transcripts

ringbuf-preload-test: $(BUILD)/rb_preload_test lib
	$(BUILD)/rb_preload_test libbpf $(BUILD)/rb_preload.libbpf.txt
	LD_PRELOAD=$(CURDIR)/$(LIB) $(BUILD)/rb_preload_test libperfbuf $(BUILD)/rb_preload.libperfbuf.txt
	diff -u $(BUILD)/rb_preload.libbpf.txt $(BUILD)/rb_preload.libperfbuf.txt
	@echo "pass: ringbuf-preload: transcripts identical ($$(wc -l < $(BUILD)/rb_preload.libbpf.txt) lines)"
	@# The fast mode (PERFBUF_ADAPTIVE=1) passes every scenario's own checks
	@# and delivers the very records libbpf does; when is its own (it reads
	@# on a tick while records flow, so a poll returns a NO_WAKEUP record).
	PERFBUF_ADAPTIVE=1 LD_PRELOAD=$(CURDIR)/$(LIB) $(BUILD)/rb_preload_test libperfbuf $(BUILD)/rb_preload.fast.txt
	grep '^  rec' $(BUILD)/rb_preload.libbpf.txt | sort > $(BUILD)/rb_preload.libbpf.recs
	grep '^  rec' $(BUILD)/rb_preload.fast.txt | sort > $(BUILD)/rb_preload.fast.recs
	diff -u $(BUILD)/rb_preload.libbpf.recs $(BUILD)/rb_preload.fast.recs
	@echo "pass: ringbuf-preload: the fast mode delivers libbpf's $$(wc -l < $(BUILD)/rb_preload.fast.recs) records"

# A program using both libraries, linked with -lbpf before and after
# -lperfbuf, with and without --as-needed: through perfbuf_* names it reads
# its records in every order, and a libbpf handle given to a perfbuf_*
# call is refused cleanly.
LINKORDER_SRC := c-tests/linkorder_test.c $(TESTUTIL)
LINK_PERFBUF := -L$(REL) -lperfbuf -Wl,-rpath,$(CURDIR)/$(REL)

linkorder-test: lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/linkorder_bpf_first $(LINKORDER_SRC) -lbpf $(LINK_PERFBUF) -ldl
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/linkorder_perfbuf_first $(LINKORDER_SRC) $(LINK_PERFBUF) -lbpf -ldl
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/linkorder_bpf_first_as_needed $(LINKORDER_SRC) -Wl,--as-needed -lbpf $(LINK_PERFBUF) -ldl
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/linkorder_perfbuf_first_as_needed $(LINKORDER_SRC) -Wl,--as-needed $(LINK_PERFBUF) -lbpf -ldl
	$(BUILD)/linkorder_bpf_first libbpf
	$(BUILD)/linkorder_perfbuf_first libperfbuf
	$(BUILD)/linkorder_bpf_first_as_needed libbpf
	$(BUILD)/linkorder_perfbuf_first_as_needed libperfbuf

# The same for ring buffers: libbpf 1.1's six ring_buffer__* names follow
# the link order; ring_buffer__ring and ring__* are libperfbuf's, and refuse
# a ring_buffer libbpf made.
RB_LINKORDER_SRC := c-tests/rb_linkorder_test.c $(TESTUTIL)

ringbuf-linkorder-test: lib | $(BUILD)
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/rb_linkorder_bpf_first $(RB_LINKORDER_SRC) -lbpf $(LINK_PERFBUF) -ldl
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/rb_linkorder_perfbuf_first $(RB_LINKORDER_SRC) $(LINK_PERFBUF) -lbpf -ldl
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/rb_linkorder_bpf_first_as_needed $(RB_LINKORDER_SRC) -Wl,--as-needed -lbpf $(LINK_PERFBUF) -ldl
	$(CC) $(TEST_CFLAGS) -o $(BUILD)/rb_linkorder_perfbuf_first_as_needed $(RB_LINKORDER_SRC) -Wl,--as-needed $(LINK_PERFBUF) -lbpf -ldl
	$(BUILD)/rb_linkorder_bpf_first libbpf
	$(BUILD)/rb_linkorder_perfbuf_first libperfbuf
	$(BUILD)/rb_linkorder_bpf_first_as_needed libbpf
	$(BUILD)/rb_linkorder_perfbuf_first_as_needed libperfbuf

check-exports: lib
	c-tests/check-exports.sh $(LIB)
	$(call pass,exports are exactly c-tests/exports.txt)

# perfbuf.h with libbpf's headers in either order and without them, as C
# (gcc, clang; GCC 14's incompatible-pointer rule) and C++: prototypes and
# libbpf-style callbacks (__u64 lost counts) fit.
check-header-compat: | $(BUILD)
	c-tests/check-header-compat.sh $(BUILD)

c-tests: check-exports check-header-compat install-test linkorder-test ringbuf-linkorder-test linked-test difftest preload-test ringbuf-difftest ringbuf-preload-test unified-test batch-read-test callers-test controls-test accounting-test decode-test examples-test events-test probe-args-test reliability python-test go-test

# ---- Rust ------------------------------------------------------------------

# The fuzz crate is its own workspace: its tests replay the seed corpus and
# the regressions on stable and check the corpus is what gen-corpus writes.
# The kernel tests read tracepoints: mount tracefs where it is missing (as
# root; the tests report it if this could not be done).
tracefs:
	@[ -d /sys/kernel/tracing/events ] || [ -d /sys/kernel/debug/tracing/events ] || \
		mount -t tracefs nodev /sys/kernel/tracing || echo "tracefs: not mounted (not root?)"

# A copy of /bin/true under a name no other process execs, so the execmon
# checks count exactly their command's execs whatever else runs.
MARK = $(CURDIR)/$(BUILD)/perfbuf-mark-true

# The Rust crate's optional features, on for tests, lint and docs.
RUST_FEATURES := perfbuf/tokio,perfbuf/log
# Tests and examples build with release's optimisation but without its fat
# LTO (Cargo.toml's test-release profile), and share one build: the same
# profile and features everywhere.
TEST_PROFILE := --profile test-release
TREL := target/test-release

# The two tests that take CPU 1 offline (tests/hotplug_live.rs, #[ignore]d
# for a plain cargo test) run in hotplug-test: left out here by name, so
# they are not counted as skipped.
HOTPLUG_TESTS := --skip cpu1_offline_online_and_back_is_read_within_a_second \
	--skip an_event_set_reads_cpu1_when_it_comes_online_and_back

cargo-test: producer-lib tracefs
	$(CARGO) test $(TEST_PROFILE) --no-fail-fast --workspace --features $(RUST_FEATURES) -- $(HOTPLUG_TESTS)
	cd fuzz && $(CARGO) test --release

# CPUs that come and go, for real (root): CPU 1 offline and back while a
# reader runs (tests/hotplug_live.rs, #[ignore]d for cargo test since it
# moves every task off CPU 1 meanwhile). The trap puts CPU 1 back whatever
# happens to the test.
hotplug-test: accounted-lib
	trap 'echo 1 > /sys/devices/system/cpu/cpu1/online 2>/dev/null || true' EXIT INT TERM HUP; \
	$(CARGO) test $(TEST_PROFILE) --workspace --features $(RUST_FEATURES) --test hotplug_live -- --ignored --nocapture

# The Rust examples against the real producer: a stream with the builder
# (libbpf's wake-ups, then the fast mode) and tokio's AsyncFd; execmon (a
# tracepoint) and uprobe_args (a uprobe with fetch arguments on its own
# function): exactly the execs and the values passed, from one pid.
rust-examples-test: producer-lib tracefs
	$(CARGO) build $(TEST_PROFILE) --examples --features $(RUST_FEATURES)
	$(TREL)/examples/stream_reader --demo 200000
	$(call pass,stream_reader)
	$(TREL)/examples/stream_reader --demo 1000000 --fast
	$(call pass,stream_reader --fast)
	$(TREL)/examples/async_reader --demo 200000
	$(call pass,async_reader)
	$(TREL)/examples/either_map --demo perf 100000
	$(call pass,either_map over a perf event array)
	$(TREL)/examples/either_map --demo ringbuf 100000
	$(call pass,either_map over a ring buffer (the same reading code))
	cp /bin/true $(MARK)
	$(TREL)/examples/execmon sh -c '$(MARK); $(MARK)' > $(BUILD)/rust_execmon.out
	test "$$(grep -c ' exec $(MARK)$$' $(BUILD)/rust_execmon.out)" = 2
	$(call pass,execmon)
	$(TREL)/examples/uprobe_args > $(BUILD)/rust_uprobe_args.out
	test "$$(sed 's/^pid [0-9]* //' $(BUILD)/rust_uprobe_args.out | tr '\n' ';')" = 'n=1 name="ada";n=2 name="grace";n=3 name="";'
	test "$$(cut -d' ' -f2 $(BUILD)/rust_uprobe_args.out | sort -u)" = "$$(cut -d' ' -f2 $(BUILD)/rust_uprobe_args.out | head -1)"
	$(call pass,uprobe_args)

# perfbuf beside the Rust BPF libraries (tests/interop/): libbpf-rs at its
# default features (libbpf built from source, linked statically: its
# perf_buffer__* must be the only ones in the binary) and aya 0.13 and 0.14
# load examples/bpf/exec_events.bpf.c; perfbuf reads the children's exec
# records. Each is a cargo project of its own with its own Cargo.lock:
# crates.io the first time, the cargo cache after. Needs root and BPF.
INTEROP := libbpf-rs aya/0.13 aya/0.14
INTEROP_REL := target/interop/release

interop-test: $(BUILD)/exec_events.bpf.o
	for p in $(INTEROP); do \
		(cd tests/interop/$$p && $(CARGO) fmt --check && \
		 $(CARGO) build --release --quiet --target-dir $(CURDIR)/target/interop && echo "pass: $$p builds") || exit 1; \
	done
	test "$$(nm $(INTEROP_REL)/perfbuf-interop-libbpf-rs | grep -c ' T perf_buffer__new$$')" = 1
	! nm $(INTEROP_REL)/perfbuf-interop-libbpf-rs | grep -q ' T perfbuf_'
	$(call pass,libbpf-rs's static libbpf defines the only perf_buffer__new and perfbuf no C symbol)
	$(INTEROP_REL)/perfbuf-interop-libbpf-rs $(BUILD)/exec_events.bpf.o
	$(call pass,perfbuf beside libbpf-rs)
	$(INTEROP_REL)/perfbuf-interop-aya-0-13 $(BUILD)/exec_events.bpf.o
	$(call pass,perfbuf beside aya 0.13)
	$(INTEROP_REL)/perfbuf-interop-aya-0-14 $(BUILD)/exec_events.bpf.o
	$(call pass,perfbuf beside aya 0.14)

# clippy over the interop programs (each its own workspace).
interop-lint:
	for p in $(INTEROP); do \
		(cd tests/interop/$$p && $(CARGO) clippy --release --quiet --target-dir $(CURDIR)/target/interop -- -D warnings) || exit 1; \
	done

# The crate is publishable: packaged, then built from the package alone.
package-check:
	$(CARGO) package -p perfbuf --allow-dirty --quiet
	$(call pass,perfbuf-$(VERSION).crate builds from its own files)

lint:
	$(CARGO) fmt --check
	$(call pass,cargo fmt --check)
	$(CARGO) clippy --release --workspace --all-targets --features $(RUST_FEATURES) -- -D warnings
	$(call pass,clippy over the workspace with the optional features)
	$(CARGO) clippy --release -p perfbuf --all-targets -- -D warnings
	$(call pass,clippy over perfbuf without them)
	RUSTDOCFLAGS=-Dwarnings $(CARGO) doc --no-deps --quiet --workspace --features $(RUST_FEATURES)
	$(call pass,cargo doc)
	cd fuzz && $(CARGO) fmt --check && $(CARGO) clippy --release --all-targets -- -D warnings
	$(call pass,fmt and clippy over fuzz/)

# Every suite make test runs, in order (c-tests and reliability name subsets).
SUITES := lint suites-test bench-report-check cargo-test hotplug-test rust-examples-test package-check interop-test check-exports check-header-compat install-test linkorder-test ringbuf-linkorder-test linked-test difftest preload-test ringbuf-difftest ringbuf-preload-test unified-test batch-read-test callers-test controls-test accounting-test decode-test examples-test events-test probe-args-test sideband-test perfdata-test fault-test soak-short asan valgrind threads-test tsan fuzz-smoke python-test go-test docs-test

# Every code block of README.md and the binding READMEs runs, or compiles,
# as written (scripts/docs-test.py: the <!-- docs-test: ... --> line before
# each block says how; a few cannot run, each saying why). As root, in a
# private mount namespace (overlays take what the blocks write).
docs-test: lib cli producer-lib $(BUILD)/exec_events.bpf.o $(BUILD)/profile.bpf.o tracefs
	python3 scripts/docs-test.py

# make test's own summary (scripts/run-suites.sh) on canned suite outputs.
suites-test:
	scripts/test-run-suites.sh

# Each suite runs even after another failed; the closing line counts the
# tests that ran (scripts/run-suites.sh), and names the failed suites.
test:
	MAKE="$(MAKE)" scripts/run-suites.sh $(SUITES)

# ---- install -----------------------------------------------------------------

# The library alone: the shared library (stripped, with its SONAME links),
# the static library (without debug info), the header, perfbuf.pc, and the
# command perfbuf (stripped) in $(BINDIR).
# Needs only Rust and a C toolchain (no libbpf). Builds first where cargo
# is on the PATH; under sudo (whose PATH has no ~/.cargo/bin) it installs
# what `make` built.
INSTALL_BUILDS := $(if $(shell command -v $(CARGO) 2>/dev/null),lib cli)
install: $(INSTALL_BUILDS)
	@test -f $(LIB) && test -f $(REL)/perfbuf || \
		{ echo "make install: nothing built, and no $(CARGO) on this PATH: run make first"; exit 1; }
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(INCDIR) $(DESTDIR)$(LIBDIR)/pkgconfig $(DESTDIR)$(BINDIR)
	install -m 755 $(REL)/perfbuf $(DESTDIR)$(BINDIR)/perfbuf
	strip --strip-unneeded $(DESTDIR)$(BINDIR)/perfbuf
	install -m 755 $(LIB) $(DESTDIR)$(LIBDIR)/libperfbuf.so.$(VERSION)
	strip --strip-unneeded $(DESTDIR)$(LIBDIR)/libperfbuf.so.$(VERSION)
	ln -sf libperfbuf.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libperfbuf.so.$(SOMAJOR)
	ln -sf libperfbuf.so.$(SOMAJOR) $(DESTDIR)$(LIBDIR)/libperfbuf.so
	install -m 644 $(REL)/libperfbuf.a $(DESTDIR)$(LIBDIR)/libperfbuf.a
	strip --strip-debug $(DESTDIR)$(LIBDIR)/libperfbuf.a
	install -m 644 include/perfbuf.h $(DESTDIR)$(INCDIR)/perfbuf.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(LIBDIR)|' -e 's|@INCDIR@|$(INCDIR)|' \
		-e 's|@VERSION@|$(VERSION)|' perfbuf.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/perfbuf.pc
	@# ldconfig only for a directory the loader searches (ldconfig -vN lists them).
	@libdir=$$(realpath $(DESTDIR)$(LIBDIR)); ldconfig=$$(command -v ldconfig || echo /sbin/ldconfig); \
	searched=$$($$ldconfig -vN 2>/dev/null | sed -n 's|^\(/[^:]*\):.*|\1|p' | xargs -r realpath -q | grep -xF "$$libdir"); \
	if [ -n "$(DESTDIR)" ]; then \
		echo "installed in $(DESTDIR)$(LIBDIR): run ldconfig on the target system"; \
	elif [ -z "$$searched" ]; then \
		echo "installed in $(LIBDIR), which the loader does not search: set LD_LIBRARY_PATH=$(LIBDIR) or link with -Wl,-rpath,$(LIBDIR)"; \
	elif [ "$$(id -u)" = 0 ]; then \
		$$ldconfig; echo "installed in $(LIBDIR); ldconfig updated the loader's cache"; \
	else \
		echo "installed in $(LIBDIR): run ldconfig as root to update the loader's cache"; \
	fi
	@# pkg-config finds perfbuf.pc only in its own search path.
	@pkg-config --variable pc_path pkg-config 2>/dev/null | tr : '\n' | grep -qxF "$(LIBDIR)/pkgconfig" || \
		echo "pkg-config does not look in $(LIBDIR)/pkgconfig: set PKG_CONFIG_PATH=$(LIBDIR)/pkgconfig"

# make install into a scratch prefix, then build and run a program with
# pkg-config against it (versioned .so, SONAME links, header, perfbuf.pc).
install-test: lib cli | $(BUILD)
	rm -rf $(BUILD)/inst
	$(MAKE) --no-print-directory install PREFIX=$(CURDIR)/$(BUILD)/inst >/dev/null
	test -L $(BUILD)/inst/lib/libperfbuf.so && test -L $(BUILD)/inst/lib/libperfbuf.so.$(SOMAJOR)
	$(call pass,SONAME links)
	$(BUILD)/inst/bin/perfbuf --version
	$(call pass,the command runs)
	! readelf -S $(BUILD)/inst/lib/libperfbuf.so.$(VERSION) | grep -q debug_info
	! readelf -S $(BUILD)/inst/lib/libperfbuf.a 2>/dev/null | grep -q debug_info
	@echo "pass: stripped: $$(du -k $(BUILD)/inst/lib/libperfbuf.so.$(VERSION) | cut -f1) kB .so and $$(du -k $(BUILD)/inst/lib/libperfbuf.a | cut -f1) kB .a"
	PKG_CONFIG_PATH=$(BUILD)/inst/lib/pkgconfig $(CC) $(CFLAGS) $(WARN) -o $(BUILD)/install_check \
		c-tests/install_check.c $$(PKG_CONFIG_PATH=$(BUILD)/inst/lib/pkgconfig pkg-config --cflags --libs perfbuf) \
		-Wl,-rpath,$(CURDIR)/$(BUILD)/inst/lib
	$(BUILD)/install_check
	$(call pass,a program built with pkg-config against the install runs)

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libperfbuf.so* $(DESTDIR)$(LIBDIR)/libperfbuf.a \
		$(DESTDIR)$(INCDIR)/perfbuf.h $(DESTDIR)$(LIBDIR)/pkgconfig/perfbuf.pc $(DESTDIR)$(BINDIR)/perfbuf

clean:
	$(CARGO) clean
	rm -rf $(BUILD) fuzz/target
