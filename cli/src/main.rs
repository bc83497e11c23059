//! `perfbuf`, the command over the perfbuf library: trace tracepoints and
//! probes, dump BPF perf event arrays, record to perf.data.

mod bpf;
mod child;
mod dump;
mod fail;
mod metrics;
mod output;
mod programs;
mod record;
mod report;
mod run;
mod spec;
mod trace;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::time::Duration;

const ABOUT: &str = "Trace kernel tracepoints and uprobes, dump what BPF programs send to a perf event array or \
a ring buffer, or record a profile to perf.data, through the perfbuf library. Needs root.";

const AFTER: &str = "\
Examples:
  perfbuf trace sched:sched_process_exec                 every exec on the machine, until Ctrl-C
  perfbuf trace sched:sched_process_exec -- make         the execs of a command and its children
  perfbuf trace --json --count 10 sched:sched_switch     ten context switches as JSON lines
  perfbuf trace 'u:/bin/bash:readline%return line=+0($retval):string'   each line bash's readline returns
  perfbuf trace --task -- sh -c 'ls; date'               forks, execs and exits of a command
  perfbuf dump /sys/fs/bpf/events                        a pinned perf event array or ring buffer, as hex
  perfbuf dump id:42 --json --order                      map id 42 as JSON, ordered by timestamp
  perfbuf record -g -- ./myprog                          profile a command into perf.data (perf report)

Exit status: 0 when done (also after Ctrl-C or SIGTERM, which drain the rings and print the summary),
1 for a run-time failure, 2 for a usage error. A status line (records/s, lost, per-CPU backlog) is
shown on stderr when it is a terminal; the summary always goes to stderr: records delivered and lost
(by where: the kernel, refused at the BPF side, dropped by the command), and per CPU the peak backlog
and the smallest ring that would have held it (--pages).

Metrics, for every command: --metrics 127.0.0.1:9464 serves http://127.0.0.1:9464/metrics for
Prometheus (OpenMetrics when asked for, else the text format 0.0.4; port 0 picks a free port, said on
stderr); --metrics-file /var/lib/prometheus/node-exporter/perfbuf.prom writes node_exporter's
textfile-collector format every second and at exit. Per CPU: perfbuf_records_delivered_total,
perfbuf_records_lost_total{reason=kernel|output_failed|dropped}, perfbuf_records_produced_total (with
dump --output-counts), perfbuf_ring_backlog_bytes, _backlog_peak_bytes, _needed_bytes,
_suggested_pages, perfbuf_records_per_second, perfbuf_seconds_since_last_record, perfbuf_cpu_online.";

#[derive(Parser)]
#[command(name = "perfbuf", version, about = ABOUT, after_help = AFTER)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const TRACE_AFTER: &str = "\
EVENT syntax:
  SUBSYSTEM:EVENT           a tracepoint (ls /sys/kernel/tracing/events/SUBSYSTEM); t: may prefix it
  u:PATH:SYMBOL[+OFFSET]    a uprobe on SYMBOL of the ELF file PATH (absolute), OFFSET bytes into it
                            (decimal or 0x hex: an instruction's first byte, before the function's end)
  u:PATH:0xFILE_OFFSET      a uprobe at a file offset of PATH (as uprobe_events writes it)
  u:PATH:SYMBOL%return      a uretprobe (at the function's entry: no +OFFSET; or u:PATH:0xFILE_OFFSET%return)
  k:SYMBOL[%return]         a kprobe / kretprobe (needs CONFIG_KPROBES)
A probe may be followed, in the same argument, by arguments as perf probe writes them:
  'u:/bin/bash:readline%return line=+0($retval):string'
  ARG = NAME=FETCH[:TYPE]; FETCH = $argN | $retval | $stackN | %REG | @ADDR | +OFF(FETCH) | -OFF(FETCH);
  TYPE = u8..u64 | s8..s64 | x8..x64 | string | ustring (default u64); a kprobe reads user memory only as
  ustring: 'k:do_sys_openat2 path=+0($arg2):ustring'.
  The probe is then defined through tracefs (uprobe_events / kprobe_events) and its arguments print as
  fields by name: 'u:/path/prog:func n=%di:s32', 'u:/path/prog:func%return r=$retval:s32'. A definition
  the kernel refuses fails with its complaint (tracefs error_log).

Output, one line per record, in time order across CPUs:
  SECONDS.MICROS cpuN PID/TID EVENT: field=value ...   (strings quoted, byte arrays in hex; ip= when no fields)
  Fields: a tracepoint's own (pointers in hex), or the arguments a probe declares, in order (x8..x64 in
  hex). --all-fields adds those the kernel adds: common_* (common_pid, ...) of every tracepoint, and a
  probe's __probe_ip (return probes: __probe_func, __probe_ret_ip), addresses in hex.
  SECONDS.MICROS cpuN PID/TID fork: pid=N ppid=N tid=N ptid=N    with --task (also exit:)
  SECONDS.MICROS cpuN PID/TID comm: pid=N tid=N name=\"NAME\" exec=1  with --task; exec=0: a rename
  LOST N records on cpuN (EVENT)                       the kernel dropped N records: its ring was full
With --json, one object per line (the schema only ever gains fields):
  {\"type\":\"sample\",\"event\":\"sched:sched_process_exec\",\"time_ns\":N,\"cpu\":N,\"pid\":N,\"tid\":N,\"ip\":N,
   \"fields\":{\"filename\":\"/usr/bin/true\",\"pid\":N,\"old_pid\":N}}
   fields: the ones shown in text (the kernel's too with --all-fields); integers are JSON numbers, in
   decimal whatever their type (ip and addresses too), strings are strings, other byte arrays hex strings
  {\"type\":\"fork\",\"time_ns\":N,\"cpu\":N,\"pid\":N,\"ppid\":N,\"tid\":N,\"ptid\":N}  (--task; \"exit\" alike)
  {\"type\":\"comm\",\"time_ns\":N,\"cpu\":N,\"pid\":N,\"tid\":N,\"name\":\"NAME\",\"exec\":true}  (--task)
  {\"type\":\"lost\",\"event\":NAME|null,\"cpu\":N,\"lost\":N}
  {\"type\":\"other\",\"event\":NAME|null,\"cpu\":N,\"record_type\":N,\"size\":N}
time_ns is CLOCK_MONOTONIC. A summary (records, lost per CPU) goes to stderr at exit.
A BPF program attached to a traced tracepoint that returns 0 makes the kernel drop the event for every
perf event on it: trace names each such program once on stderr (warning: BPF program ID \"NAME\" ...).

Examples:
  perfbuf trace sched:sched_process_exec
  perfbuf trace sched:sched_process_exec sched:sched_process_exit -- sh -c 'ls; date'
  perfbuf trace --filter 'prev_pid == 0' --cpu 0 --duration 2s sched:sched_switch
  perfbuf trace --pid 1234 'u:/usr/lib/x86_64-linux-gnu/libc.so.6:malloc size=%di:u64'
  perfbuf trace --task -- make                          the forks, execs and exits of make and its children
  perfbuf trace --cgroup /sys/fs/cgroup/system.slice --json syscalls:sys_enter_openat";

const DUMP_AFTER: &str = "\
perfbuf dump reads a BPF_MAP_TYPE_PERF_EVENT_ARRAY as `bpftool map event_pipe` does: it opens a perf
event and ring on each CPU and stores them in the map's slots, so the BPF program's output comes to it.
Whoever read the map before stops receiving records (until it opens its perf buffer again): dump says so
before it starts, and refuses when another process reads the map (it holds the map and has perf rings
mapped), unless --force. A process that only holds the map (a loader that attached its programs and
waits, its perf events not mapped) reads nothing and loses nothing: dump starts and names it.

It reads a BPF_MAP_TYPE_RINGBUF too (bpftool cannot), with the same output: one ring for all CPUs, whose
records come in the order their space was reserved and say no CPU (`ring:`, \"cpu\":null), exactly as the
program wrote them. The kernel counts no losses of a ring buffer: a full ring fails the program's output.
A ring buffer's readers share one read position: dump refuses when another process may read it (it holds
the map and maps BPF map memory), unless --force. --pages, --wakeup-*, --max-delay and --fast do not
apply to it and are ignored; --cpu is refused.

Output: `cpu N: SIZE bytes: xx xx ...` per record, `cpu N: LOST N records` when the kernel dropped some;
--json: {\"type\":\"sample\",\"cpu\":N,\"size\":N,\"data\":\"HEX\"} and {\"type\":\"lost\",\"cpu\":N,\"lost\":N};
--raw FILE: each record's bytes as the program sent them (padded to 8 bytes by the kernel), back to back.
With --output-counts COUNTS (the PERFBUF_OUTPUT_COUNTS map the program sends through, include/perfbuf.bpf.h)
the outputs the kernel refused without counting them (a CPU not read, an event left dead by a CPU that
came back) are counted too, and what was produced. At exit, per CPU on stderr: records, bytes,
delivered and lost (kernel, refused at the BPF side, dropped after --count), of how many produced; the
peak backlog and the smallest ring that would have held it.

Examples:
  perfbuf dump /sys/fs/bpf/my_events
  perfbuf dump id:42 --count 100 --json
  perfbuf dump id:42 --order                    records of all CPUs ordered by their first 8 bytes (a u64 time)
  perfbuf dump id:42 --fast --raw out.bin       the fast mode (batched wake-ups when busy), raw to a file
  perfbuf dump id:42 --wakeup-records 64 --max-delay 5ms
  perfbuf dump /sys/fs/bpf/events --output-counts /sys/fs/bpf/events_counts --metrics 127.0.0.1:9464";

const RECORD_AFTER: &str = "\
perfbuf record writes what it samples to a perf.data file (-o) that `perf report`, `perf script` and
the tools built on perf.data read, as perf record does. Without -e it samples cpu-clock at -F Hz.

EVENT (-e, repeatable):
  cpu-clock                 the CPU clock, a software timer every machine has, sampled at -F Hz
  task-clock                the task clock (time on CPU of the watched tasks), sampled at -F Hz
  cycles                    CPU cycles at -F Hz; where there is no hardware PMU (virtual machines) the
                            CPU clock instead, which the first line says
  anything `perfbuf trace` takes: SUBSYSTEM:EVENT, u:PATH:SYMBOL[+OFFSET][%return], k:SYMBOL[%return];
                            recorded on every hit, with its fields (perf script shows them), a
                            probe's arguments too (the file carries the format of its tracefs event)
-F applies to the sampling events; the default is 999 Hz (perf record's is 4000), at most
/proc/sys/kernel/perf_event_max_sample_rate. -g adds call chains (frame pointers: build programs with
-fno-omit-frame-pointer for user-space stacks) to every event.

What is watched: with -- COMMAND, the command and its children, from its exec to its exit (-a: the
whole machine while it runs); with --pid, that process; otherwise every task, until Ctrl-C, SIGTERM or
--duration. Process records (COMM, FORK, EXIT, MMAP2) are always written, and those of the processes
already running are read from /proc, so perf report names programs and symbols. An existing file is
overwritten. At the end: samples, lost records, bytes and the file, on stderr; exit 0.

Examples:
  perfbuf record -- ./myprog arg                          profile a command at 999 Hz into perf.data
  perfbuf record -g -o prof.data -- make -j2              with call chains, into prof.data
  perfbuf record -F 99 --duration 10s                     the whole machine for 10 s
  perfbuf record -e cycles -e sched:sched_switch --pid 1234
  perfbuf record --cpu 0 -e 'u:/usr/bin/bash:readline'
  perfbuf record -e 'u:/usr/bin/bash:readline p=%di:u64' -- bash   a probe with an argument
  perf report -i perf.data --stdio --sort comm,sym        then read it with perf
  perf script -i perf.data";

#[derive(Subcommand)]
enum Command {
    /// Trace tracepoints and probes, time-ordered across CPUs
    #[command(after_help = TRACE_AFTER)]
    Trace {
        #[arg(
            required_unless_present = "task",
            value_name = "EVENT",
            help = "Events: SUBSYSTEM:EVENT, u:PATH:SYMBOL[%return] [ARGS], k:SYMBOL[%return] (see below)"
        )]
        events: Vec<String>,
        /// A tracefs filter for the tracepoints, e.g. 'pid > 100 && comm != "sh"'
        #[arg(long)]
        filter: Option<String>,
        /// Only this process (or thread)
        #[arg(long, conflicts_with = "command")]
        pid: Option<i32>,
        /// Only the tasks of this cgroup (v2 directory) and its descendants
        #[arg(long, value_name = "DIR")]
        cgroup: Option<PathBuf>,
        /// Only these CPUs: 0,2-3
        #[arg(long, value_name = "LIST", value_parser = run::parse_cpu_list)]
        cpu: Option<run::CpuList>,
        /// Stop after this long: 10, 10s, 500ms, 2m
        #[arg(long, value_parser = run::parse_duration)]
        duration: Option<Duration>,
        /// Stop after this many records
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// JSON lines (schema below)
        #[arg(long)]
        json: bool,
        /// Also the fields the kernel adds: common_* of tracepoints, __probe_ip (__probe_func,
        /// __probe_ret_ip) of probes with arguments
        #[arg(long)]
        all_fields: bool,
        /// Process records too: fork, comm (name set, exec=1 by an exec) and exit of the traced tasks
        #[arg(long)]
        task: bool,
        /// Ring pages per CPU, a power of two
        #[arg(long, default_value_t = 64, value_name = "N")]
        pages: usize,
        #[command(flatten)]
        metrics: metrics::MetricsOpts,
        /// Start this command and trace it and its children; stop when it exits
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// Dump a BPF perf event array or ring buffer (pinned path or id:N)
    #[command(after_help = DUMP_AFTER)]
    Dump {
        /// The map: a pinned path (/sys/fs/bpf/NAME) or id:N
        map: String,
        /// Output format
        #[arg(long, value_enum, default_value_t = dump::Format::Hex, conflicts_with = "json")]
        format: dump::Format,
        /// Same as --format json
        #[arg(long)]
        json: bool,
        /// Write the records' raw bytes to FILE instead
        #[arg(long, value_name = "FILE")]
        raw: Option<PathBuf>,
        /// Order records across CPUs by a u64 timestamp in their first 8 bytes
        #[arg(long)]
        order: bool,
        /// The fast mode: batched wake-ups while a CPU is busy (delivery within 1 ms)
        #[arg(long)]
        fast: bool,
        /// Wake up every N records instead of every record
        #[arg(long, value_name = "N")]
        wakeup_records: Option<u32>,
        /// Wake up when N bytes are waiting instead of every record
        #[arg(long, value_name = "N")]
        wakeup_bytes: Option<u32>,
        /// With batched wake-ups, no record waits longer than this (default 10ms)
        #[arg(long, value_parser = run::parse_duration, value_name = "TIME")]
        max_delay: Option<Duration>,
        /// Ring pages per CPU, a power of two
        #[arg(long, default_value_t = 64, value_name = "N")]
        pages: usize,
        /// Only these CPUs: 0,2-3
        #[arg(long, value_name = "LIST", value_parser = run::parse_cpu_list)]
        cpu: Option<run::CpuList>,
        /// Take the map's slots even if another process reads it
        #[arg(long)]
        force: bool,
        /// Stop after this many records
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Stop after this long: 10, 10s, 500ms, 2m
        #[arg(long, value_parser = run::parse_duration)]
        duration: Option<Duration>,
        /// The PERFBUF_OUTPUT_COUNTS map (include/perfbuf.bpf.h) of the program writing MAP: pinned path or id:N
        #[arg(long, value_name = "COUNTS")]
        output_counts: Option<String>,
        #[command(flatten)]
        metrics: metrics::MetricsOpts,
    },
    /// Record samples, tracepoints and probes to perf.data, for perf report
    #[command(after_help = RECORD_AFTER)]
    Record {
        /// An event to record (repeatable; default cpu-clock): cpu-clock, task-clock, cycles, or as trace
        #[arg(short = 'e', long = "event", value_name = "EVENT")]
        events: Vec<String>,
        /// Samples a second for cpu-clock, task-clock and cycles
        #[arg(short = 'F', long = "freq", value_name = "HZ", default_value_t = record::DEFAULT_HZ)]
        freq: u64,
        /// Record call chains
        #[arg(short = 'g')]
        callgraph: bool,
        /// Only this process (and its threads)
        #[arg(long, conflicts_with = "command")]
        pid: Option<i32>,
        /// With a command: the whole machine while it runs, not only the command
        #[arg(short = 'a', long = "all-cpus", requires = "command")]
        all: bool,
        /// Only these CPUs: 0,2-3
        #[arg(long, value_name = "LIST", value_parser = run::parse_cpu_list)]
        cpu: Option<run::CpuList>,
        /// Output file
        #[arg(short = 'o', long, default_value = "perf.data", value_name = "FILE")]
        output: PathBuf,
        /// Stop after this long: 10, 10s, 500ms, 2m
        #[arg(long, value_parser = run::parse_duration)]
        duration: Option<Duration>,
        /// Ring pages per CPU, a power of two
        #[arg(long, default_value_t = 128, value_name = "N")]
        pages: usize,
        #[command(flatten)]
        metrics: metrics::MetricsOpts,
        /// Start this command and record it and its children; stop when it exits
        #[arg(last = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
}

fn dispatch(cli: Cli) -> fail::Result<()> {
    match cli.command {
        Command::Trace {
            events,
            filter,
            pid,
            cgroup,
            cpu,
            duration,
            count,
            json,
            all_fields,
            task,
            pages,
            metrics,
            command,
        } => trace::run(trace::TraceArgs {
            events,
            filter,
            pid,
            cgroup,
            cpus: cpu.map(|c| c.0),
            duration,
            count,
            json,
            all_fields,
            task,
            pages,
            metrics,
            command,
        }),
        Command::Dump {
            map,
            format,
            json,
            raw,
            order,
            fast,
            wakeup_records,
            wakeup_bytes,
            max_delay,
            pages,
            cpu,
            force,
            count,
            duration,
            output_counts,
            metrics,
        } => dump::run(dump::DumpArgs {
            map,
            format: if json { dump::Format::Json } else { format },
            raw,
            order,
            fast,
            wakeup_records,
            wakeup_bytes,
            max_delay,
            pages,
            cpus: cpu.map(|c| c.0),
            force,
            count,
            duration,
            output_counts,
            metrics,
        }),
        Command::Record {
            events,
            freq,
            callgraph,
            pid,
            all,
            cpu,
            output,
            duration,
            pages,
            metrics,
            command,
        } => record::run(record::RecordArgs {
            events,
            freq,
            callgraph,
            pid,
            all,
            cpus: cpu.map(|c| c.0),
            output,
            duration,
            pages,
            metrics,
            command,
        }),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(f) = dispatch(cli) {
        eprintln!("perfbuf: {f}");
        std::process::exit(f.code());
    }
}
