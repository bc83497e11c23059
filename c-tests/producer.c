/* See producer.h. The programs are assembled here as struct bpf_insn
 * arrays so the tests need no clang. */
#define _GNU_SOURCE
#include "producer.h"

#include <errno.h>
#include <linux/bpf.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define INSN(c, d, s, o, i) ((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define MOV64_REG(d, s) INSN(BPF_ALU64 | BPF_MOV | BPF_X, d, s, 0, 0)
#define MOV64_IMM(d, i) INSN(BPF_ALU64 | BPF_MOV | BPF_K, d, 0, 0, i)
#define ALU64_IMM(op, d, i) INSN(BPF_ALU64 | (op) | BPF_K, d, 0, 0, i)
#define ALU64_REG(op, d, s) INSN(BPF_ALU64 | (op) | BPF_X, d, s, 0, 0)
#define LDX(sz, d, s, o) INSN(BPF_LDX | (sz) | BPF_MEM, d, s, o, 0)
#define STX(sz, d, s, o) INSN(BPF_STX | (sz) | BPF_MEM, d, s, o, 0)
#define JMP_REG(op, d, s, o) INSN(BPF_JMP | (op) | BPF_X, d, s, o, 0)
#define CALL(fn) INSN(BPF_JMP | BPF_CALL, 0, 0, 0, fn)
#define EXIT() INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0)
/* First of the two slots that load the map with fd `fd` into register d;
 * the second slot is all zero. */
#define LD_MAP_FD(d, fd) INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd)

static long sys_bpf(int cmd, union bpf_attr *attr)
{
	return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

static int load_insns(const struct bpf_insn *insns, int n)
{
	static char log[65536];
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_SCHED_CLS;
	attr.insns = (uintptr_t)insns;
	attr.insn_cnt = (unsigned)n;
	attr.license = (uintptr_t) "GPL";
	attr.log_buf = (uintptr_t)log;
	attr.log_size = sizeof(log);
	attr.log_level = 1;
	int fd = (int)sys_bpf(BPF_PROG_LOAD, &attr);
	if (fd < 0) {
		int err = errno;
		fprintf(stderr, "producer: BPF_PROG_LOAD: %s\n%s\n", strerror(err), log);
		errno = err;
	}
	return fd;
}

/* The program, of type BPF_PROG_TYPE_SCHED_CLS (tc): XDP would be the
 * natural choice, but BPF_PROG_TEST_RUN of an XDP program with repeat > 1
 * swaps the XDP dispatcher in and out around every call, which waits for an
 * RCU grace period: about 16 ms per call on these VMs, which capped the
 * producer near 100 k records/s. A tc program pays about 30 ns per run.
 *   if (data + 10 > data_end) return 1;
 *   meta = stamp ? bpf_ktime_get_ns() : *(u64 *)(data + 2);
 *   cnt = *(u16 *)data;
 *   return bpf_perf_event_output(ctx, map, BPF_F_CURRENT_CPU | cnt << 32, &meta, 8);
 */
static int load_prog(int map_fd, int stamp)
{
	struct bpf_insn insns[32];
	int n = 0;
	insns[n++] = MOV64_REG(BPF_REG_6, BPF_REG_1);		  /* r6 = ctx */
	insns[n++] = LDX(BPF_W, BPF_REG_2, BPF_REG_6, offsetof(struct __sk_buff, data));
	insns[n++] = LDX(BPF_W, BPF_REG_3, BPF_REG_6, offsetof(struct __sk_buff, data_end));
	insns[n++] = MOV64_REG(BPF_REG_4, BPF_REG_2);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_4, 10);
	insns[n++] = JMP_REG(BPF_JGT, BPF_REG_4, BPF_REG_3, 1); /* short packet: skip */
	insns[n++] = INSN(BPF_JMP | BPF_JA, 0, 0, 2, 0);
	insns[n++] = MOV64_IMM(BPF_REG_0, 1);
	insns[n++] = EXIT();
	insns[n++] = LDX(BPF_H, BPF_REG_7, BPF_REG_2, 0); /* r7 = cnt */
	if (stamp) {
		insns[n++] = CALL(BPF_FUNC_ktime_get_ns);
		insns[n++] = STX(BPF_DW, BPF_REG_10, BPF_REG_0, -8);
	} else {
		insns[n++] = LDX(BPF_DW, BPF_REG_8, BPF_REG_2, 2);
		insns[n++] = STX(BPF_DW, BPF_REG_10, BPF_REG_8, -8);
	}
	insns[n++] = ALU64_IMM(BPF_LSH, BPF_REG_7, 32);
	/* r3 = BPF_F_CURRENT_CPU (a 32-bit mov zero-extends) | cnt << 32 */
	insns[n++] = INSN(BPF_ALU | BPF_MOV | BPF_K, BPF_REG_3, 0, 0, -1);
	insns[n++] = ALU64_REG(BPF_OR, BPF_REG_3, BPF_REG_7);
	insns[n++] = MOV64_REG(BPF_REG_1, BPF_REG_6);
	insns[n++] = LD_MAP_FD(BPF_REG_2, map_fd);
	insns[n++] = INSN(0, 0, 0, 0, 0);
	insns[n++] = MOV64_REG(BPF_REG_4, BPF_REG_10);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_4, -8);
	insns[n++] = MOV64_IMM(BPF_REG_5, 8);
	insns[n++] = CALL(BPF_FUNC_perf_event_output);
	insns[n++] = EXIT();

	return load_insns(insns, n);
}

int producer_open(struct producer *p, unsigned max_entries)
{
	p->map_fd = p->det_prog_fd = p->stamp_prog_fd = -1;
	if (max_entries == 0) {
		long n = sysconf(_SC_NPROCESSORS_CONF);
		max_entries = n > 0 ? (unsigned)n : 1;
	}
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_type = BPF_MAP_TYPE_PERF_EVENT_ARRAY;
	attr.key_size = 4;
	attr.value_size = 4;
	attr.max_entries = max_entries;
	memcpy(attr.map_name, "perfbuf_test", 13);
	p->map_fd = (int)sys_bpf(BPF_MAP_CREATE, &attr);
	if (p->map_fd < 0)
		return -errno;
	p->det_prog_fd = load_prog(p->map_fd, 0);
	if (p->det_prog_fd >= 0)
		p->stamp_prog_fd = load_prog(p->map_fd, 1);
	if (p->det_prog_fd < 0 || p->stamp_prog_fd < 0) {
		int err = -errno;
		producer_close(p);
		return err;
	}
	return 0;
}

void producer_close(struct producer *p)
{
	if (p->stamp_prog_fd >= 0)
		close(p->stamp_prog_fd);
	if (p->det_prog_fd >= 0)
		close(p->det_prog_fd);
	if (p->map_fd >= 0)
		close(p->map_fd);
	p->map_fd = p->det_prog_fd = p->stamp_prog_fd = -1;
}

int producer_test_run(int prog_fd, int cpu, const void *pkt, unsigned pkt_len, unsigned repeat, int *helper_ret)
{
	cpu_set_t old, one;
	if (sched_getaffinity(0, sizeof(old), &old))
		return -errno;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof(one), &one))
		return -errno;

	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.test.prog_fd = (unsigned)prog_fd;
	attr.test.data_in = (uintptr_t)pkt;
	attr.test.data_size_in = pkt_len;
	attr.test.repeat = repeat;
	/* Take the packet back too: valgrind insists data_out be addressable. */
	static __thread uint8_t out[PRODUCER_MAX_N + 4096];
	attr.test.data_out = (uintptr_t)out;
	attr.test.data_size_out = sizeof(out);
	int err = sys_bpf(BPF_PROG_TEST_RUN, &attr) ? -errno : 0;
	sched_setaffinity(0, sizeof(old), &old);
	if (!err && helper_ret)
		*helper_ret = (int)attr.test.retval;
	return err;
}

int producer_emit(struct producer *p, int use_stamp, int cpu, const void *pkt, unsigned pkt_len,
		  unsigned repeat, int *helper_ret)
{
	return producer_test_run(use_stamp ? p->stamp_prog_fd : p->det_prog_fd, cpu, pkt, pkt_len, repeat, helper_ret);
}

/* Packet for producer_emit_det: u16 cnt, then bytes derived from the seed
 * (bytes 2..10 become the 8 meta bytes). */
static unsigned det_packet(unsigned n, uint8_t seed, uint8_t *pkt)
{
	unsigned cnt = n - 8;
	unsigned len = cnt > 10 ? cnt : 10;
	if (len < 14)
		len = 14; /* test_run minimum (an Ethernet header) */
	pkt[0] = (uint8_t)cnt;
	pkt[1] = (uint8_t)(cnt >> 8);
	for (unsigned i = 2; i < len; i++)
		pkt[i] = (uint8_t)(seed + i * 7);
	return len;
}

void producer_expected(unsigned n, uint8_t seed, uint8_t *out)
{
	uint8_t pkt[PRODUCER_MAX_N + 16];
	det_packet(n, seed, pkt);
	memcpy(out, pkt + 2, 8);
	memcpy(out + 8, pkt, n - 8);
}

int producer_emit_det(struct producer *p, int cpu, unsigned n, uint8_t seed, unsigned repeat, int *helper_ret)
{
	if (n < 8 || n > PRODUCER_MAX_N)
		return -EINVAL;
	uint8_t pkt[PRODUCER_MAX_N + 16];
	unsigned len = det_packet(n, seed, pkt);
	return producer_emit(p, 0, cpu, pkt, len, repeat, helper_ret);
}

int producer_emit_stamped(struct producer *p, int cpu, unsigned n, unsigned repeat, int *helper_ret)
{
	if (n < 8 || n > PRODUCER_MAX_N)
		return -EINVAL;
	uint8_t pkt[PRODUCER_MAX_N + 16];
	unsigned len = det_packet(n, 0, pkt);
	return producer_emit(p, 1, cpu, pkt, len, repeat, helper_ret);
}

int producer_emit_stamped_seq(struct producer *p, int cpu, unsigned n, uint32_t seq, int *helper_ret)
{
	if (n < 16 || n > PRODUCER_MAX_N)
		return -EINVAL;
	uint8_t pkt[PRODUCER_MAX_N + 16];
	unsigned cnt = n - 8, len = cnt < 14 ? 14 : cnt;
	memset(pkt, 0, len);
	pkt[0] = (uint8_t)cnt;
	pkt[1] = (uint8_t)(cnt >> 8);
	memcpy(pkt + 2, &seq, 4);
	pkt[6] = (uint8_t)cpu;
	return producer_emit(p, 1, cpu, pkt, len, 1, helper_ret);
}

/* ---- ring buffer ---- */

#define JMP_IMM(op, d, i, o) INSN(BPF_JMP | (op) | BPF_K, d, 0, o, i)
#define ST_W(d, o, i) INSN(BPF_ST | BPF_W | BPF_MEM, d, 0, o, i)
#define ATOMIC_ADD64(d, s, o) INSN(BPF_STX | BPF_DW | BPF_ATOMIC, d, s, o, BPF_ADD)
#define SCRATCH_SIZE (8 + PRODUCER_MAX_N)

/* Same shape as load_prog's det program, into a ring buffer:
 *   if (data + 10 > data_end) return 1;
 *   cnt = *(u16 *)data; if (cnt > PRODUCER_MAX_N) return 1;
 *   buf = scratch[0] (per CPU);  if (!buf) return 1;
 *   *(u64 *)buf = *(u64 *)(data + 2);
 *   if (cnt >= 1 && (ret = bpf_skb_load_bytes(ctx, 0, buf + 8, cnt))) return ret;
 *   ret = bpf_ringbuf_output(&rb, buf, cnt + 8, 0);
 *   if (ret) { st = stats[0]; if (st) { atomic st->output_failed += 1; st->last_error = ret; } }
 *   return ret;
 * bpf_ringbuf_output takes its data from the stack or a map value, not the
 * packet, hence the copy. */
static int load_ringbuf_prog(const struct ringbuf_producer *r)
{
	struct bpf_insn insns[64];
	int n = 0, ret1[4], nret1 = 0, to_output, to_exit, to_saved;
	insns[n++] = MOV64_REG(BPF_REG_6, BPF_REG_1); /* r6 = ctx */
	insns[n++] = LDX(BPF_W, BPF_REG_2, BPF_REG_6, offsetof(struct __sk_buff, data));
	insns[n++] = LDX(BPF_W, BPF_REG_3, BPF_REG_6, offsetof(struct __sk_buff, data_end));
	insns[n++] = MOV64_REG(BPF_REG_4, BPF_REG_2);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_4, 10);
	ret1[nret1++] = n;
	insns[n++] = JMP_REG(BPF_JGT, BPF_REG_4, BPF_REG_3, 0); /* short packet */
	insns[n++] = LDX(BPF_H, BPF_REG_7, BPF_REG_2, 0);	 /* r7 = cnt */
	insns[n++] = LDX(BPF_DW, BPF_REG_8, BPF_REG_2, 2);	 /* r8 = meta */
	ret1[nret1++] = n;
	insns[n++] = JMP_IMM(BPF_JGT, BPF_REG_7, PRODUCER_MAX_N, 0);
	insns[n++] = ST_W(BPF_REG_10, -4, 0); /* key 0 */
	insns[n++] = LD_MAP_FD(BPF_REG_1, r->scratch_fd);
	insns[n++] = INSN(0, 0, 0, 0, 0);
	insns[n++] = MOV64_REG(BPF_REG_2, BPF_REG_10);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_2, -4);
	insns[n++] = CALL(BPF_FUNC_map_lookup_elem);
	ret1[nret1++] = n;
	insns[n++] = JMP_IMM(BPF_JEQ, BPF_REG_0, 0, 0);
	insns[n++] = MOV64_REG(BPF_REG_9, BPF_REG_0); /* r9 = buf */
	insns[n++] = STX(BPF_DW, BPF_REG_9, BPF_REG_8, 0);
	to_output = n;
	insns[n++] = JMP_IMM(BPF_JLT, BPF_REG_7, 1, 0); /* nothing to copy */
	insns[n++] = MOV64_REG(BPF_REG_1, BPF_REG_6);
	insns[n++] = MOV64_IMM(BPF_REG_2, 0);
	insns[n++] = MOV64_REG(BPF_REG_3, BPF_REG_9);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_3, 8);
	insns[n++] = MOV64_REG(BPF_REG_4, BPF_REG_7);
	insns[n++] = CALL(BPF_FUNC_skb_load_bytes);
	to_exit = n;
	insns[n++] = JMP_IMM(BPF_JNE, BPF_REG_0, 0, 0); /* packet shorter than cnt: return ret */
	insns[to_output].off = (short)(n - to_output - 1);
	insns[n++] = LD_MAP_FD(BPF_REG_1, r->map_fd);
	insns[n++] = INSN(0, 0, 0, 0, 0);
	insns[n++] = MOV64_REG(BPF_REG_2, BPF_REG_9);
	insns[n++] = MOV64_REG(BPF_REG_3, BPF_REG_7);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_3, 8);
	insns[n++] = MOV64_IMM(BPF_REG_4, 0);
	insns[n++] = CALL(BPF_FUNC_ringbuf_output);
	int ok = n;
	insns[n++] = JMP_IMM(BPF_JEQ, BPF_REG_0, 0, 0); /* written: return 0 */
	insns[n++] = MOV64_REG(BPF_REG_9, BPF_REG_0);	 /* r9 = ret */
	insns[n++] = ST_W(BPF_REG_10, -4, 0);
	insns[n++] = LD_MAP_FD(BPF_REG_1, r->stats_fd);
	insns[n++] = INSN(0, 0, 0, 0, 0);
	insns[n++] = MOV64_REG(BPF_REG_2, BPF_REG_10);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_2, -4);
	insns[n++] = CALL(BPF_FUNC_map_lookup_elem);
	to_saved = n;
	insns[n++] = JMP_IMM(BPF_JEQ, BPF_REG_0, 0, 0);
	insns[n++] = MOV64_IMM(BPF_REG_1, 1);
	insns[n++] = ATOMIC_ADD64(BPF_REG_0, BPF_REG_1, 0);
	insns[n++] = STX(BPF_DW, BPF_REG_0, BPF_REG_9, 8);
	insns[to_saved].off = (short)(n - to_saved - 1);
	insns[n++] = MOV64_REG(BPF_REG_0, BPF_REG_9);
	insns[to_exit].off = (short)(n - to_exit - 1);
	insns[ok].off = (short)(n - ok - 1);
	insns[n++] = EXIT(); /* return r0 */
	for (int i = 0; i < nret1; i++)
		insns[ret1[i]].off = (short)(n - ret1[i] - 1);
	insns[n++] = MOV64_IMM(BPF_REG_0, 1);
	insns[n++] = EXIT();
	return load_insns(insns, n);
}

/* producer_ringbuf_ctl's program:
 *   if (data + 14 > data_end) return 3;
 *   op = data[0]; flags = data[1]; meta = *(u64 *)(data + 2);
 *   if (op == OUTPUT) { u64 rec[2] = {meta, meta}; return bpf_ringbuf_output(&rb, rec, 16, flags); }
 *   rec = bpf_ringbuf_reserve(&rb, 16, 0); if (!rec) return 1;
 *   rec[0] = rec[1] = meta;
 *   op == SUBMIT ? bpf_ringbuf_submit(rec, flags) : bpf_ringbuf_discard(rec, flags);
 *   return 0; */
static int load_ringbuf_ctl_prog(const struct ringbuf_producer *r)
{
	struct bpf_insn insns[48];
	int n = 0, short_pkt, to_reserve, null_rec, to_discard, done;
	insns[n++] = MOV64_REG(BPF_REG_6, BPF_REG_1);
	insns[n++] = LDX(BPF_W, BPF_REG_2, BPF_REG_6, offsetof(struct __sk_buff, data));
	insns[n++] = LDX(BPF_W, BPF_REG_3, BPF_REG_6, offsetof(struct __sk_buff, data_end));
	insns[n++] = MOV64_REG(BPF_REG_4, BPF_REG_2);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_4, 14);
	short_pkt = n;
	insns[n++] = JMP_REG(BPF_JGT, BPF_REG_4, BPF_REG_3, 0);
	insns[n++] = LDX(BPF_B, BPF_REG_7, BPF_REG_2, 0); /* r7 = op */
	insns[n++] = LDX(BPF_B, BPF_REG_8, BPF_REG_2, 1); /* r8 = flags */
	insns[n++] = LDX(BPF_DW, BPF_REG_9, BPF_REG_2, 2); /* r9 = meta */
	to_reserve = n;
	insns[n++] = JMP_IMM(BPF_JNE, BPF_REG_7, RINGBUF_OUTPUT, 0);
	insns[n++] = STX(BPF_DW, BPF_REG_10, BPF_REG_9, -16);
	insns[n++] = STX(BPF_DW, BPF_REG_10, BPF_REG_9, -8);
	insns[n++] = LD_MAP_FD(BPF_REG_1, r->map_fd);
	insns[n++] = INSN(0, 0, 0, 0, 0);
	insns[n++] = MOV64_REG(BPF_REG_2, BPF_REG_10);
	insns[n++] = ALU64_IMM(BPF_ADD, BPF_REG_2, -16);
	insns[n++] = MOV64_IMM(BPF_REG_3, RINGBUF_CTL_SIZE);
	insns[n++] = MOV64_REG(BPF_REG_4, BPF_REG_8);
	insns[n++] = CALL(BPF_FUNC_ringbuf_output);
	insns[n++] = EXIT(); /* return its result */
	insns[to_reserve].off = (short)(n - to_reserve - 1);
	insns[n++] = LD_MAP_FD(BPF_REG_1, r->map_fd);
	insns[n++] = INSN(0, 0, 0, 0, 0);
	insns[n++] = MOV64_IMM(BPF_REG_2, RINGBUF_CTL_SIZE);
	insns[n++] = MOV64_IMM(BPF_REG_3, 0);
	insns[n++] = CALL(BPF_FUNC_ringbuf_reserve);
	null_rec = n;
	insns[n++] = JMP_IMM(BPF_JEQ, BPF_REG_0, 0, 0);
	insns[n++] = STX(BPF_DW, BPF_REG_0, BPF_REG_9, 0);
	insns[n++] = STX(BPF_DW, BPF_REG_0, BPF_REG_9, 8);
	insns[n++] = MOV64_REG(BPF_REG_1, BPF_REG_0);
	insns[n++] = MOV64_REG(BPF_REG_2, BPF_REG_8);
	to_discard = n;
	insns[n++] = JMP_IMM(BPF_JNE, BPF_REG_7, RINGBUF_RESERVE_SUBMIT, 0);
	insns[n++] = CALL(BPF_FUNC_ringbuf_submit);
	done = n;
	insns[n++] = INSN(BPF_JMP | BPF_JA, 0, 0, 0, 0);
	insns[to_discard].off = (short)(n - to_discard - 1);
	insns[n++] = CALL(BPF_FUNC_ringbuf_discard);
	insns[done].off = (short)(n - done - 1);
	insns[n++] = MOV64_IMM(BPF_REG_0, 0);
	insns[n++] = EXIT();
	insns[null_rec].off = (short)(n - null_rec - 1);
	insns[n++] = MOV64_IMM(BPF_REG_0, 1);
	insns[n++] = EXIT();
	insns[short_pkt].off = (short)(n - short_pkt - 1);
	insns[n++] = MOV64_IMM(BPF_REG_0, 3);
	insns[n++] = EXIT();
	return load_insns(insns, n);
}

static int create_map(unsigned type, unsigned key_size, unsigned value_size, unsigned max_entries, const char *name)
{
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_type = type;
	attr.key_size = key_size;
	attr.value_size = value_size;
	attr.max_entries = max_entries;
	strncpy(attr.map_name, name, sizeof(attr.map_name) - 1);
	int fd = (int)sys_bpf(BPF_MAP_CREATE, &attr);
	return fd < 0 ? -errno : fd;
}

int producer_open_ringbuf(struct ringbuf_producer *r, unsigned ringbuf_bytes)
{
	r->map_fd = r->scratch_fd = r->stats_fd = r->prog_fd = r->ctl_prog_fd = -1;
	int fd = create_map(BPF_MAP_TYPE_RINGBUF, 0, 0, ringbuf_bytes, "perfbuf_rb");
	if (fd < 0)
		return fd;
	r->map_fd = fd;
	fd = create_map(BPF_MAP_TYPE_PERCPU_ARRAY, 4, SCRATCH_SIZE, 1, "perfbuf_rb_tmp");
	if (fd < 0)
		goto fail;
	r->scratch_fd = fd;
	fd = create_map(BPF_MAP_TYPE_ARRAY, 4, sizeof(struct ringbuf_producer_stats), 1, "perfbuf_rb_st");
	if (fd < 0)
		goto fail;
	r->stats_fd = fd;
	fd = load_ringbuf_prog(r);
	if (fd < 0) {
		fd = -errno;
		goto fail;
	}
	r->prog_fd = fd;
	fd = load_ringbuf_ctl_prog(r);
	if (fd < 0) {
		fd = -errno;
		goto fail;
	}
	r->ctl_prog_fd = fd;
	return 0;
fail:
	producer_close_ringbuf(r);
	return fd;
}

void producer_close_ringbuf(struct ringbuf_producer *r)
{
	int *fds[] = {&r->ctl_prog_fd, &r->prog_fd, &r->stats_fd, &r->scratch_fd, &r->map_fd};
	for (unsigned i = 0; i < sizeof(fds) / sizeof(fds[0]); i++) {
		if (*fds[i] >= 0)
			close(*fds[i]);
		*fds[i] = -1;
	}
}

int producer_emit_ringbuf(struct ringbuf_producer *r, int cpu, unsigned n, uint8_t seed, unsigned repeat,
			  int *helper_ret)
{
	if (n < 8 || n > PRODUCER_MAX_N)
		return -EINVAL;
	uint8_t pkt[PRODUCER_MAX_N + 16];
	unsigned len = det_packet(n, seed, pkt);
	return producer_test_run(r->prog_fd, cpu, pkt, len, repeat, helper_ret);
}

int producer_ringbuf_stats(const struct ringbuf_producer *r, struct ringbuf_producer_stats *out)
{
	uint32_t key = 0;
	union bpf_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.map_fd = (unsigned)r->stats_fd;
	attr.key = (uintptr_t)&key;
	attr.value = (uintptr_t)out;
	return sys_bpf(BPF_MAP_LOOKUP_ELEM, &attr) ? -errno : 0;
}

int producer_ringbuf_ctl(struct ringbuf_producer *r, int cpu, enum ringbuf_op op, unsigned flags, uint64_t meta,
			 int *helper_ret)
{
	uint8_t pkt[14] = {(uint8_t)op, (uint8_t)flags};
	memcpy(pkt + 2, &meta, 8);
	return producer_test_run(r->ctl_prog_fd, cpu, pkt, sizeof(pkt), 1, helper_ret);
}
