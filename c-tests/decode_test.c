/* perfbuf_decode on records the kernel wrote. For each sample_type
 * combination, a raw perf buffer (PERF_COUNT_SW_BPF_OUTPUT, our attr) on a
 * known CPU list receives deterministic samples from a BPF program run in
 * this task; event_cb decodes every record and checks each field against
 * what the test knows: the payload, the CPU, the pid/tid, a CLOCK_MONOTONIC
 * window, the event id from PERF_EVENT_IOC_ID, a plausible callchain and
 * register dump. Every record is also decoded truncated at every length
 * (as rec_len, and with header.size patched), placed against a PROT_NONE
 * page so that any read past rec_len faults: all must fail with -EBADMSG. */
#define _GNU_SOURCE
#include "perfbuf.h"
#include "producer.h"
#include "testutil.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>


static struct producer prod;

#define SAMPLE_ID_BITS                                                                             \
	(PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU | \
	 PERF_SAMPLE_IDENTIFIER)

/* The kernel's PERF_MEM_NA: what a software event reports as data source. */
#define MEM_NA                                                                                 \
	(PERF_MEM_S(OP, NA) | PERF_MEM_S(LVL, NA) | PERF_MEM_S(SNOOP, NA) | PERF_MEM_S(LOCK, NA) | \
	 PERF_MEM_S(TLB, NA) | PERF_MEM_S(LVLNUM, NA))

/* x86 register numbers (asm/perf_regs.h) used in the register masks. */
#define X86_REG_AX 0
#define X86_REG_SP 7
#define X86_REG_IP 8

struct scenario {
	const char *name;
	uint64_t sample_type;
	uint64_t read_format;
	int sample_id_all;
	uint64_t regs_user, regs_intr;
	uint32_t stack_user;
	int optional; /* the kernel may refuse this attr: skipped outside CI, failed under CI=true */
	int lost;     /* overflow a 1-page ring to get a LOST record */
};

#define MAX_WANT 512
struct want {
	unsigned n;
	uint8_t seed;
};

struct ctx {
	const struct scenario *sc;
	struct perfbuf_decode_attr da;
	int ncpu, cpus[2];
	uint64_t ids[2]; /* the event id of each CPU's ring */
	struct want want[2][MAX_WANT];
	unsigned nwant[2], next[2];
	uint64_t t0, last_time[2];
	unsigned samples, lost_records, truncated;
	uint64_t lost;
	int printed;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int is_kernel_addr(uint64_t a)
{
#ifdef __x86_64__
	return a >= 0xffff800000000000ull;
#else
	return a != 0;
#endif
}

static int is_user_addr(uint64_t a)
{
#ifdef __x86_64__
	return a != 0 && a < 0x0000800000000000ull;
#else
	return a != 0;
#endif
}

static int cpu_index(const struct ctx *c, int cpu)
{
	for (int i = 0; i < c->ncpu; i++)
		if (c->cpus[i] == cpu)
			return i;
	return -1;
}

/* A page-aligned area whose last page is PROT_NONE: a record copied so it
 * ends (up to 7 bytes of alignment) against the guard faults on overreads. */
static uint8_t *guard_area, *guard_page;
#define GUARD_DATA (72 * 1024)

static int guard_init(void)
{
	long page = sysconf(_SC_PAGESIZE);
	size_t total = GUARD_DATA + (size_t)page;
	guard_area = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (guard_area == MAP_FAILED)
		return -errno;
	guard_page = guard_area + GUARD_DATA;
	return mprotect(guard_page, (size_t)page, PROT_NONE) ? -errno : 0;
}

/* Copies len bytes of rec to just before the guard page, 8-aligned. */
static void *against_guard(const void *rec, size_t len)
{
	uint8_t *dst = guard_page - ((len + 7) & ~(size_t)7);
	memcpy(dst, rec, len);
	return dst;
}

static void check_identity(struct ctx *c, int ci, int cpu, const struct perfbuf_sample *s, const char *what)
{
	const char *n = c->sc->name;
	if (s->present & PERF_SAMPLE_TID)
		EXPECT(s->pid == (uint32_t)getpid() && s->tid == (uint32_t)gettid(), "%s %s: pid %u tid %u", n, what,
		       s->pid, s->tid);
	if (s->present & PERF_SAMPLE_TIME) {
		uint64_t now = now_ns();
		EXPECT(s->time >= c->t0 && s->time <= now, "%s %s: time %" PRIu64 " outside [%" PRIu64 ", %" PRIu64 "]",
		       n, what, s->time, c->t0, now);
		EXPECT(s->time >= c->last_time[ci], "%s %s: time went back", n, what);
		c->last_time[ci] = s->time;
	}
	if (s->present & PERF_SAMPLE_ID)
		EXPECT(s->id == c->ids[ci], "%s %s: id %" PRIu64 " want %" PRIu64, n, what, s->id, c->ids[ci]);
	if (s->present & PERF_SAMPLE_IDENTIFIER)
		EXPECT(s->identifier == c->ids[ci], "%s %s: identifier %" PRIu64, n, what, s->identifier);
	if (s->present & PERF_SAMPLE_STREAM_ID)
		EXPECT(s->stream_id == c->ids[ci], "%s %s: stream_id %" PRIu64, n, what, s->stream_id);
	if (s->present & PERF_SAMPLE_CPU)
		EXPECT(s->cpu == (uint32_t)cpu && s->cpu_res == 0, "%s %s: cpu %u res %u on cpu %d", n, what, s->cpu,
		       s->cpu_res, cpu);
}

static void check_callchain(struct ctx *c, const struct perfbuf_sample *s)
{
	const char *n = c->sc->name;
	EXPECT(s->callchain_nr >= 2 && s->callchain_nr <= 127 + 8, "%s: callchain nr %" PRIu64, n,
	       s->callchain_nr);
	if (s->callchain_nr < 2)
		return;
	EXPECT(s->callchain[0] == (uint64_t)PERF_CONTEXT_KERNEL, "%s: callchain[0] %#" PRIx64, n,
	       s->callchain[0]);
	/* Kernel addresses, then maybe PERF_CONTEXT_USER and user addresses. */
	int user = 0, bad = 0, kernel_ips = 0;
	for (uint64_t i = 1; i < s->callchain_nr; i++) {
		uint64_t ip = s->callchain[i];
		if (ip == (uint64_t)PERF_CONTEXT_USER) {
			bad += user;
			user = 1;
		} else if (user) {
			bad += !is_user_addr(ip);
		} else {
			bad += !is_kernel_addr(ip);
			kernel_ips++;
		}
	}
	EXPECT(!bad && kernel_ips >= 1, "%s: implausible callchain (%d bad, %d kernel ips)", n, bad, kernel_ips);
}

static void check_read(struct ctx *c, int ci, const struct perfbuf_sample *s)
{
	const char *n = c->sc->name;
	uint64_t rf = c->sc->read_format;
	uint64_t stride = 1 + !!(rf & PERF_FORMAT_ID) + !!(rf & PERF_FORMAT_LOST);
	if (rf & PERF_FORMAT_GROUP) {
		EXPECT((s->flags & PERFBUF_DECODE_F_READ_GROUP) && s->read_group, "%s: group flag", n);
		EXPECT(s->read_nr == 1 && s->read_stride == stride, "%s: group nr %" PRIu64 " stride %" PRIu64, n,
		       s->read_nr, s->read_stride);
		if (s->read_group && s->read_nr == 1) {
			EXPECT(s->read_group[0] == s->read_value, "%s: group value", n);
			if (rf & PERF_FORMAT_ID)
				EXPECT(s->read_group[1] == c->ids[ci], "%s: group id %" PRIu64, n, s->read_group[1]);
		}
	} else {
		EXPECT(!(s->flags & PERFBUF_DECODE_F_READ_GROUP) && !s->read_group && s->read_nr == 1,
		       "%s: single read", n);
	}
	if (rf & PERF_FORMAT_ID)
		EXPECT(s->read_id == c->ids[ci], "%s: read id %" PRIu64 " want %" PRIu64, n, s->read_id, c->ids[ci]);
	if (rf & PERF_FORMAT_LOST)
		EXPECT(s->read_lost == 0, "%s: read lost %" PRIu64, n, s->read_lost);
	if ((rf & PERF_FORMAT_TOTAL_TIME_ENABLED) && (rf & PERF_FORMAT_TOTAL_TIME_RUNNING))
		EXPECT(s->read_time_enabled >= s->read_time_running && s->read_time_enabled > 0,
		       "%s: enabled %" PRIu64 " running %" PRIu64, n, s->read_time_enabled, s->read_time_running);
	/* bpf_perf_event_output does not count: the value stays small. */
	EXPECT(s->read_value < 1000000, "%s: read value %" PRIu64, n, s->read_value);
}

static void check_regs(struct ctx *c, const struct perfbuf_sample *s)
{
	const char *n = c->sc->name;
	const struct scenario *sc = c->sc;
	if (sc->sample_type & PERF_SAMPLE_REGS_USER) {
		EXPECT(s->regs_user_abi == PERF_SAMPLE_REGS_ABI_64, "%s: user abi %" PRIu64, n, s->regs_user_abi);
		EXPECT(s->regs_user_nr == (uint64_t)__builtin_popcountll(sc->regs_user), "%s: user regs %" PRIu64, n,
		       s->regs_user_nr);
		if (s->regs_user_nr == 3) /* AX, SP, IP: the syscall's user context */
			EXPECT(is_user_addr(s->regs_user[1]) && is_user_addr(s->regs_user[2]),
			       "%s: user sp %#" PRIx64 " ip %#" PRIx64, n, s->regs_user[1], s->regs_user[2]);
	}
	if (sc->sample_type & PERF_SAMPLE_REGS_INTR) {
		EXPECT(s->regs_intr_abi == PERF_SAMPLE_REGS_ABI_64, "%s: intr abi %" PRIu64, n, s->regs_intr_abi);
		EXPECT(s->regs_intr_nr == (uint64_t)__builtin_popcountll(sc->regs_intr), "%s: intr regs %" PRIu64, n,
		       s->regs_intr_nr);
		if (s->regs_intr_nr == 3) /* the kernel context of bpf_perf_event_output */
			EXPECT(is_kernel_addr(s->regs_intr[2]) && is_kernel_addr(s->regs_intr[1]),
			       "%s: intr sp %#" PRIx64 " ip %#" PRIx64, n, s->regs_intr[1], s->regs_intr[2]);
	}
	if (sc->sample_type & PERF_SAMPLE_STACK_USER) {
		EXPECT(s->stack_user_size == sc->stack_user && s->stack_user, "%s: stack size %" PRIu64, n,
		       s->stack_user_size);
		EXPECT(s->stack_user_dyn_size > 0 && s->stack_user_dyn_size <= s->stack_user_size,
		       "%s: stack dyn_size %" PRIu64, n, s->stack_user_dyn_size);
	}
}

static void check_sample(struct ctx *c, int ci, int cpu, const struct perf_event_header *hdr,
			 const struct perfbuf_sample *s)
{
	const struct scenario *sc = c->sc;
	const char *n = sc->name;
	c->samples++;
	EXPECT(s->present == sc->sample_type, "%s: present %#" PRIx64, n, s->present);
	EXPECT((s->misc & PERF_RECORD_MISC_CPUMODE_MASK) == PERF_RECORD_MISC_KERNEL, "%s: misc %#x", n, s->misc);
	unsigned k = c->next[ci]++;
	EXPECT(k < c->nwant[ci], "%s: more samples than produced on cpu %d", n, cpu);
	if (k >= c->nwant[ci])
		return;
	struct want w = c->want[ci][k];
	/* RAW: the payload, padded by the kernel so size + data end on 8 bytes. */
	uint8_t expected[PRODUCER_MAX_N];
	producer_expected(w.n, w.seed, expected);
	uint64_t padded = ((w.n + 4 + 7) & ~7u) - 4;
	EXPECT(s->raw && s->raw_size == padded, "%s: raw size %" PRIu64 " for %u bytes", n, s->raw_size, w.n);
	if (s->raw && s->raw_size >= w.n)
		EXPECT(!memcmp(s->raw, expected, w.n), "%s: raw payload differs (n %u seed %u)", n, w.n, w.seed);
	EXPECT((const uint8_t *)s->raw > (const uint8_t *)hdr &&
		       (const uint8_t *)s->raw + s->raw_size <= (const uint8_t *)hdr + hdr->size,
	       "%s: raw outside the record", n);
	check_identity(c, ci, cpu, s, "sample");
	if (sc->sample_type & PERF_SAMPLE_IP)
		EXPECT(is_kernel_addr(s->ip), "%s: ip %#" PRIx64, n, s->ip);
	if (sc->sample_type & PERF_SAMPLE_ADDR)
		EXPECT(s->addr == 0, "%s: addr %#" PRIx64, n, s->addr);
	/* bpf_perf_event_output initialises its sample data with period 0. */
	if (sc->sample_type & PERF_SAMPLE_PERIOD)
		EXPECT(s->period == 0, "%s: period %" PRIu64, n, s->period);
	if (sc->sample_type & PERF_SAMPLE_CALLCHAIN)
		check_callchain(c, s);
	if (sc->sample_type & PERF_SAMPLE_READ)
		check_read(c, ci, s);
	check_regs(c, s);
	if (sc->sample_type & (PERF_SAMPLE_WEIGHT | PERF_SAMPLE_WEIGHT_STRUCT))
		EXPECT(s->weight == 0 && s->weight_var1_dw == 0, "%s: weight %#" PRIx64, n, s->weight);
	if (sc->sample_type & PERF_SAMPLE_DATA_SRC)
		EXPECT(s->data_src == MEM_NA, "%s: data_src %#" PRIx64 " want PERF_MEM_NA", n, s->data_src);
	if (sc->sample_type & PERF_SAMPLE_TRANSACTION)
		EXPECT(s->transaction == 0, "%s: transaction %#" PRIx64, n, s->transaction);
	if (sc->sample_type & PERF_SAMPLE_PHYS_ADDR)
		EXPECT(s->phys_addr == 0, "%s: phys_addr %#" PRIx64, n, s->phys_addr);
	if (sc->sample_type & PERF_SAMPLE_CGROUP)
		EXPECT(s->cgroup != 0, "%s: cgroup id 0", n);
	if (sc->sample_type & PERF_SAMPLE_CODE_PAGE_SIZE)
		EXPECT(s->code_page_size >= 4096 && !(s->code_page_size & (s->code_page_size - 1)),
		       "%s: code page size %" PRIu64, n, s->code_page_size);
	if (sc->sample_type & PERF_SAMPLE_DATA_PAGE_SIZE)
		EXPECT(s->data_page_size == 0, "%s: data page size %" PRIu64 " for addr 0", n, s->data_page_size);
	if (!c->printed++) {
		printf("    first sample: %u bytes, raw %" PRIu64, hdr->size, s->raw_size);
		if (sc->sample_type & PERF_SAMPLE_IP)
			printf(", ip %#" PRIx64, s->ip);
		if (sc->sample_type & PERF_SAMPLE_PERIOD)
			printf(", period %" PRIu64, s->period);
		if (sc->sample_type & PERF_SAMPLE_CALLCHAIN)
			printf(", callchain nr %" PRIu64, s->callchain_nr);
		if (sc->sample_type & PERF_SAMPLE_READ)
			printf(", read value %" PRIu64 " enabled %" PRIu64, s->read_value, s->read_time_enabled);
		if (sc->sample_type & PERF_SAMPLE_STACK_USER)
			printf(", user stack %" PRIu64 "/%" PRIu64, s->stack_user_dyn_size, s->stack_user_size);
		if (sc->sample_type & PERF_SAMPLE_DATA_SRC)
			printf(", data_src %#" PRIx64, s->data_src);
		if (sc->sample_type & PERF_SAMPLE_CGROUP)
			printf(", cgroup %" PRIu64, s->cgroup);
		if (sc->sample_type & PERF_SAMPLE_CODE_PAGE_SIZE)
			printf(", code page %" PRIu64, s->code_page_size);
		printf("\n");
	}
}

static void check_lost(struct ctx *c, int ci, int cpu, const struct perfbuf_sample *s)
{
	const char *n = c->sc->name;
	c->lost_records++;
	c->lost += s->lost;
	uint64_t id_bits = c->sc->sample_id_all ? c->sc->sample_type & SAMPLE_ID_BITS : 0;
	EXPECT(s->present == id_bits, "%s: lost present %#" PRIx64 " want %#" PRIx64, n, s->present, id_bits);
	EXPECT(s->lost_id == c->ids[ci], "%s: lost id %" PRIu64, n, s->lost_id);
	EXPECT(s->lost > 0, "%s: lost 0", n);
	check_identity(c, ci, cpu, s, "LOST sample_id");
	/* The kernel drops the newest records: skip that many expectations. */
	c->next[ci] += (unsigned)s->lost;
	printf("    LOST record on cpu %d: %" PRIu64 " lost, sample_id present %#" PRIx64 ", pid %u cpu %u\n", cpu,
	       s->lost, s->present, s->pid, s->cpu);
}

/* Every truncation of the record fails cleanly. */
static void check_truncations(struct ctx *c, const struct perf_event_header *hdr)
{
	const char *n = c->sc->name;
	unsigned size = hdr->size;
	int bad_len = 0, bad_size = 0, bad_errno = 0;
	for (unsigned len = 0; len < size; len++) {
		struct perfbuf_sample s = {.sz = sizeof(s)};
		void *rec = against_guard(hdr, len);
		errno = 0;
		bad_len += perfbuf_decode(rec, len, &c->da, &s) != -EBADMSG;
		bad_errno += errno != EBADMSG;
		if (len >= sizeof(*hdr)) {
			((struct perf_event_header *)rec)->size = (uint16_t)len;
			bad_size += perfbuf_decode(rec, len, &c->da, &s) != -EBADMSG;
		}
	}
	EXPECT(!bad_len && !bad_errno, "%s: %d truncations by rec_len not EBADMSG (%d errno)", n, bad_len,
	       bad_errno);
	EXPECT(!bad_size, "%s: %d truncations by header.size not EBADMSG", n, bad_size);
	c->truncated++;
	/* The whole record against the guard decodes, also with a larger rec_len. */
	struct perfbuf_sample a = {.sz = sizeof(a)}, b = {.sz = sizeof(b)};
	void *rec = against_guard(hdr, size);
	EXPECT(perfbuf_decode(rec, size, &c->da, &a) == 0, "%s: copy does not decode", n);
	EXPECT(perfbuf_decode(hdr, size + 4096, &c->da, &b) == 0 && a.present == b.present && a.time == b.time &&
		       a.raw_size == b.raw_size,
	       "%s: larger rec_len", n);
}

static enum bpf_perf_event_ret on_event(void *vctx, int cpu, struct perf_event_header *hdr)
{
	struct ctx *c = vctx;
	int ci = cpu_index(c, cpu);
	EXPECT(ci >= 0, "%s: record from unexpected cpu %d", c->sc->name, cpu);
	if (ci < 0)
		return LIBBPF_PERF_EVENT_CONT;
	struct perfbuf_sample s = {.sz = sizeof(s)};
	int r = perfbuf_decode(hdr, hdr->size, &c->da, &s);
	EXPECT(r == 0, "%s: decode of type %u size %u: %d", c->sc->name, hdr->type, hdr->size, r);
	if (r)
		return LIBBPF_PERF_EVENT_CONT;
	EXPECT(s.record_type == hdr->type && s.misc == hdr->misc && s.size == hdr->size, "%s: header",
	       c->sc->name);
	if (hdr->type == PERF_RECORD_SAMPLE)
		check_sample(c, ci, cpu, hdr, &s);
	else if (hdr->type == PERF_RECORD_LOST)
		check_lost(c, ci, cpu, &s);
	else
		EXPECT(0, "%s: unexpected record type %u", c->sc->name, hdr->type);
	check_truncations(c, hdr);
	return LIBBPF_PERF_EVENT_CONT;
}

static void emit(struct ctx *c, int ci, unsigned n, uint8_t seed, unsigned repeat)
{
	int ret = 0;
	int err = producer_emit_det(&prod, c->cpus[ci], n, seed, repeat, &ret);
	EXPECT(err == 0, "emit: %d", err);
	for (unsigned i = 0; i < repeat && c->nwant[ci] < MAX_WANT; i++)
		c->want[ci][c->nwant[ci]++] = (struct want){n, seed};
}

static int run_scenario(const struct scenario *sc, int ncpu)
{
	static struct ctx c;
	memset(&c, 0, sizeof(c));
	c.sc = sc;
	c.ncpu = ncpu;
	for (int i = 0; i < ncpu; i++)
		c.cpus[i] = i;

	struct perf_event_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.type = PERF_TYPE_SOFTWARE;
	attr.size = sizeof(attr);
	attr.config = PERF_COUNT_SW_BPF_OUTPUT;
	attr.sample_period = 1;
	attr.wakeup_events = 1;
	attr.sample_type = sc->sample_type;
	attr.read_format = sc->read_format;
	attr.sample_id_all = sc->sample_id_all;
	attr.use_clockid = 1;
	attr.clockid = CLOCK_MONOTONIC;
	attr.sample_regs_user = sc->regs_user;
	attr.sample_regs_intr = sc->regs_intr;
	attr.sample_stack_user = sc->stack_user;

	/* The layout, from the attr and by hand: both the same. */
	c.da = (struct perfbuf_decode_attr){.sz = sizeof(c.da)};
	EXPECT(perfbuf_decode_attr_from(&attr, &c.da) == 0, "decode_attr_from");
	struct perfbuf_decode_attr manual = {.sz = sizeof(manual),
					     .sample_type = sc->sample_type,
					     .read_format = sc->read_format,
					     .sample_regs_user = sc->regs_user,
					     .sample_regs_intr = sc->regs_intr,
					     .sample_id_all = (uint32_t)sc->sample_id_all};
	EXPECT(!memcmp(&manual, &c.da, sizeof(manual)), "%s: perfbuf_decode_attr_from differs", sc->name);

	int keys[2] = {0, 1};
	struct perf_buffer_raw_opts opts = {.sz = sizeof(opts), .cpu_cnt = ncpu, .cpus = c.cpus, .map_keys = keys};
	errno = 0;
	struct perf_buffer *pb = perf_buffer__new_raw(prod.map_fd, sc->lost ? 1 : 8, &attr, on_event, &c, &opts);
	if (!pb && sc->optional && !ci_mode()) {
		printf("skip %s: the kernel refuses this attr (%s)\n", sc->name, strerror(errno));
		return -1;
	}
	EXPECT(pb, "%s: perf_buffer__new_raw: %s", sc->name, strerror(errno));
	if (!pb)
		return 0;
	EXPECT((int)perf_buffer__buffer_cnt(pb) == ncpu, "%s: rings", sc->name);
	for (int idx = 0; idx < ncpu; idx++) {
		int ci = cpu_index(&c, perfbuf_buffer_cpu(pb, (size_t)idx));
		uint64_t id = 0;
		int ok = ci >= 0 && !ioctl(perf_buffer__buffer_fd(pb, (size_t)idx), PERF_EVENT_IOC_ID, &id);
		EXPECT(ok, "%s: PERF_EVENT_IOC_ID", sc->name);
		if (ok)
			c.ids[ci] = id;
	}

	c.t0 = now_ns();
	if (sc->lost) {
		/* 300 records into a 4 KiB ring, consumed, then one more: the
		 * kernel writes a LOST record before it. */
		emit(&c, 0, 16, 1, 300);
		EXPECT(perf_buffer__consume(pb) == 0, "%s: consume", sc->name);
		emit(&c, 0, 24, 2, 1);
		EXPECT(perf_buffer__consume(pb) == 0, "%s: consume", sc->name);
		EXPECT(c.lost_records == 1 && c.samples + c.lost == 301, "%s: %u samples + %" PRIu64 " lost != 301",
		       sc->name, c.samples, c.lost);
	} else {
		static const unsigned sizes[] = {8, 9, 12, 13, 16, 20, 64, 100, 255, 1000, 2000};
		for (int ci = 0; ci < ncpu; ci++)
			for (unsigned k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
				emit(&c, ci, sizes[k], (uint8_t)(ci * 50 + k), 1);
		EXPECT(perf_buffer__consume(pb) == 0, "%s: consume", sc->name);
		EXPECT(c.lost_records == 0, "%s: unexpected LOST", sc->name);
	}
	for (int ci = 0; ci < ncpu; ci++)
		EXPECT(c.next[ci] == c.nwant[ci], "%s: cpu %d: %u of %u records accounted", sc->name, c.cpus[ci],
		       c.next[ci], c.nwant[ci]);
	printf("    %u samples, %u LOST records, %u records truncated at every length\n", c.samples, c.lost_records,
	       c.truncated);
	perf_buffer__free(pb);
	return 0;
}

/* The C API's argument rules, on synthetic records. */
static void test_api(void)
{
	uint64_t rec[4] = {0};
	struct perf_event_header *h = (struct perf_event_header *)rec;
	h->type = PERF_RECORD_SAMPLE;
	h->size = 16;
	rec[1] = 0xffffffff81000000ull;
	struct perfbuf_decode_attr da = {.sz = sizeof(da), .sample_type = PERF_SAMPLE_IP};
	struct perfbuf_sample s = {.sz = sizeof(s)};
	EXPECT(perfbuf_decode(h, 16, &da, &s) == 0 && s.ip == rec[1] && s.present == PERF_SAMPLE_IP, "ip record");
	errno = 0;
	EXPECT(perfbuf_decode(NULL, 16, &da, &s) == -EINVAL && errno == EINVAL, "NULL rec");
	EXPECT(perfbuf_decode(h, 16, NULL, &s) == -EINVAL, "NULL attr");
	EXPECT(perfbuf_decode(h, 16, &da, NULL) == -EINVAL, "NULL out");
	EXPECT(perfbuf_decode((void *)((char *)rec + 4), 8, &da, &s) == -EINVAL, "misaligned rec");
	struct perfbuf_sample small = {.sz = 16};
	EXPECT(perfbuf_decode(h, 16, &da, &small) == -EINVAL, "out sz 16");
	struct perfbuf_decode_attr bad = {.sz = 4};
	EXPECT(perfbuf_decode(h, 16, &bad, &s) == -EINVAL, "attr sz 4");
	struct perfbuf_decode_attr tail = {.sz = sizeof(tail), .sample_type = PERF_SAMPLE_IP, .reserved = 1};
	EXPECT(perfbuf_decode(h, 16, &tail, &s) == -EINVAL, "non-zero reserved");
	errno = 0;
	EXPECT(perfbuf_decode(h, 15, &da, &s) == -EBADMSG && errno == EBADMSG, "rec_len < header.size");
	EXPECT(s.record_type == PERF_RECORD_SAMPLE && s.size == 16 && s.ip == 0, "header kept on error");
	h->size = 24;
	EXPECT(perfbuf_decode(h, 24, &da, &s) == -EBADMSG, "trailing bytes");
	h->type = PERF_RECORD_AUX;
	errno = 0;
	EXPECT(perfbuf_decode(h, 24, &da, &s) == -EOPNOTSUPP && errno == EOPNOTSUPP, "AUX not decoded");
	h->type = PERF_RECORD_MMAP; /* decoded (a side-band record): 16 bytes are too few for it */
	EXPECT(perfbuf_decode(h, 24, &da, &s) == -EBADMSG, "short MMAP");
	h->type = PERF_RECORD_LOST;
	rec[1] = 5;
	rec[2] = 7;
	EXPECT(perfbuf_decode(h, 24, &da, &s) == 0 && s.lost_id == 5 && s.lost == 7 && s.present == 0, "LOST");
	struct perfbuf_decode_attr newer = {.sz = sizeof(newer), .sample_type = PERF_SAMPLE_IP | (1ull << 40)};
	h->type = PERF_RECORD_SAMPLE;
	h->size = 16;
	EXPECT(perfbuf_decode(h, 16, &newer, &s) == -EOPNOTSUPP, "unknown sample_type bit");
	struct perf_event_attr pa = {.size = 63};
	EXPECT(perfbuf_decode_attr_from(&pa, &da) == -EINVAL, "attr size 63");
	EXPECT(perfbuf_decode_attr_from(NULL, &da) == -EINVAL, "NULL attr");
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	producer_open_or_exit(&prod, 0);
	if (guard_init()) {
		fprintf(stderr, "cannot map the guard area\n");
		return 1;
	}
	int ncpu = sysconf(_SC_NPROCESSORS_ONLN) >= 2 ? 2 : 1;
	const uint64_t R = PERF_SAMPLE_RAW;
	const uint64_t regs = (1ull << X86_REG_AX) | (1ull << X86_REG_SP) | (1ull << X86_REG_IP);
	const struct scenario scenarios[] = {
		{.name = "raw", .sample_type = R},
		{.name = "ip_tid_time_cpu", .sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
							   PERF_SAMPLE_CPU | R},
		{.name = "identifier_id_stream_period",
		 .sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_PERIOD | R},
		{.name = "time_addr_callchain",
		 .sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_ADDR | PERF_SAMPLE_CALLCHAIN | R},
		{.name = "tid_time_read_id",
		 .sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | R | PERF_SAMPLE_READ,
		 .read_format = PERF_FORMAT_ID},
		{.name = "read_times_id_lost",
		 .sample_type = PERF_SAMPLE_READ | R,
		 .read_format = PERF_FORMAT_TOTAL_TIME_ENABLED | PERF_FORMAT_TOTAL_TIME_RUNNING | PERF_FORMAT_ID |
				PERF_FORMAT_LOST,
		 .optional = 1},
		{.name = "read_group",
		 .sample_type = PERF_SAMPLE_READ | PERF_SAMPLE_ID | R,
		 .read_format = PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED},
		{.name = "sample_id_all_lost",
		 .sample_type = SAMPLE_ID_BITS | R,
		 .sample_id_all = 1,
		 .lost = 1},
		{.name = "sample_id_all_lost_tid_cpu",
		 .sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_CPU | PERF_SAMPLE_IP | R,
		 .sample_id_all = 1,
		 .lost = 1},
		{.name = "lost_without_sample_id", .sample_type = PERF_SAMPLE_TIME | R, .lost = 1},
		{.name = "regs_stack",
		 .sample_type = PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_REGS_INTR | R,
		 .regs_user = regs,
		 .regs_intr = regs,
		 .stack_user = 256,
		 .optional = 1},
		{.name = "weight_src_txn_phys_cgroup_pages",
		 .sample_type = PERF_SAMPLE_WEIGHT | PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_TRANSACTION |
				PERF_SAMPLE_PHYS_ADDR | PERF_SAMPLE_CGROUP | PERF_SAMPLE_DATA_PAGE_SIZE |
				PERF_SAMPLE_CODE_PAGE_SIZE | R,
		 .optional = 1},
		{.name = "everything",
		 .sample_type = PERF_SAMPLE_IDENTIFIER | PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME |
				PERF_SAMPLE_ADDR | PERF_SAMPLE_ID | PERF_SAMPLE_STREAM_ID | PERF_SAMPLE_CPU |
				PERF_SAMPLE_PERIOD | PERF_SAMPLE_READ | PERF_SAMPLE_CALLCHAIN | R |
				PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER | PERF_SAMPLE_WEIGHT_STRUCT |
				PERF_SAMPLE_DATA_SRC | PERF_SAMPLE_TRANSACTION | PERF_SAMPLE_REGS_INTR |
				PERF_SAMPLE_PHYS_ADDR | PERF_SAMPLE_CGROUP | PERF_SAMPLE_DATA_PAGE_SIZE |
				PERF_SAMPLE_CODE_PAGE_SIZE,
		 .read_format = PERF_FORMAT_GROUP | PERF_FORMAT_ID | PERF_FORMAT_TOTAL_TIME_ENABLED |
				PERF_FORMAT_TOTAL_TIME_RUNNING,
		 .regs_user = regs,
		 .regs_intr = regs,
		 .stack_user = 512,
		 .sample_id_all = 1,
		 .optional = 1},
	};
	int n = (int)(sizeof(scenarios) / sizeof(scenarios[0]));
	int passed = 0, failed = 0, skipped = 0;

	int before = failures;
	test_api();
	printf("%s api\n", failures == before ? "ok  " : "FAIL");
	passed += failures == before;
	failed += failures != before;
	for (int i = 0; i < n; i++) {
		before = failures;
		printf("%s: sample_type %#" PRIx64 "%s\n", scenarios[i].name, (uint64_t)scenarios[i].sample_type,
		       scenarios[i].sample_id_all ? ", sample_id_all" : "");
		if (run_scenario(&scenarios[i], ncpu) < 0) {
			skipped++;
			continue;
		}
		printf("%s %s\n", failures == before ? "ok  " : "FAIL", scenarios[i].name);
		passed += failures == before;
		failed += failures != before;
	}
	producer_close(&prod);
	printf("decode_test: %d checks, %d failed checks, %d scenarios skipped\n", checks, failures, skipped);
	printf("decode_test: %d passed, %d failed, %d skipped\n", passed, failed, skipped);
	return failed ? 1 : 0;
}
