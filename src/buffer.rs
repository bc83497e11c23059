//! `PerfBuffer`: the safe core behind the C handle. One perf event and ring
//! per CPU, an epoll set over them, and libbpf's poll/consume semantics.

use crate::abi::LIBBPF_PERF_EVENT_CONT;
use crate::callbacks::{Callbacks, DispatchStats};
use crate::cpu;
use crate::error::{Errno, Result, libbpf_err};
use crate::kernel::PerfEventAttr;
use crate::log;
use crate::ring::PerfRing;
use crate::sys::{
    self, AttrSource, BPF_MAP_TYPE_PERF_EVENT_ARRAY, PERF_EVENT_IOC_DISABLE, PERF_EVENT_IOC_ENABLE,
};
use core::ffi::c_int;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

/// Which CPUs get a buffer.
pub enum CpuSelection {
    /// Every online CPU below the possible count (and below the map's
    /// `max_entries`); map key = CPU id. Offline CPUs are skipped.
    AllOnline,
    /// Exactly these `(cpu, map_key)` pairs, in order; none is skipped.
    Explicit(Vec<(c_int, c_int)>),
}

/// Everything a constructor needs.
pub struct Config<'a> {
    /// The `BPF_MAP_TYPE_PERF_EVENT_ARRAY` (borrowed, never closed).
    pub map_fd: RawFd,
    /// Data pages per CPU; a power of two.
    pub page_cnt: usize,
    /// The event to open on each CPU.
    pub attr: AttrSource<'a>,
    /// Which CPUs.
    pub cpus: CpuSelection,
    /// Where records go.
    pub callbacks: Callbacks,
}

/// One CPU's event and ring.
pub struct CpuBuf {
    cpu: c_int,
    map_key: c_int,
    fd: OwnedFd,
    ring: PerfRing,
    stats: DispatchStats,
}

impl CpuBuf {
    /// The CPU this buffer reads.
    pub fn cpu(&self) -> c_int {
        self.cpu
    }

    /// The perf event fd.
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The ring.
    pub fn ring(&self) -> &PerfRing {
        &self.ring
    }

    /// What dispatching has counted so far.
    pub fn stats(&self) -> DispatchStats {
        self.stats
    }

    /// libbpf's teardown order: forget the map entry, unmap, disable, close.
    fn teardown(self, map_fd: RawFd) {
        let CpuBuf { map_key, fd, ring, .. } = self;
        let _ = sys::map_delete_u32(map_fd, map_key as u32);
        drop(ring);
        let _ = sys::perf_ioctl(&fd, PERF_EVENT_IOC_DISABLE, 0);
        drop(fd);
    }
}

/// A set of per-CPU perf rings read through one epoll instance.
pub struct PerfBuffer {
    map_fd: RawFd,
    callbacks: Callbacks,
    bufs: Vec<CpuBuf>,
    events: Vec<libc::epoll_event>,
    epoll: OwnedFd,
}

impl PerfBuffer {
    /// Builds the buffer in libbpf's order; on any failure everything
    /// already set up is torn down (as `perf_buffer__free` would) and the
    /// first error is returned.
    pub fn new(cfg: Config<'_>) -> Result<Box<PerfBuffer>> {
        let Config { map_fd, page_cnt, attr, cpus, callbacks } = cfg;
        if page_cnt == 0 || !page_cnt.is_power_of_two() {
            log::warn(format_args!("page count should be power of two, but is {page_cnt}"));
            return Err(Errno::INVAL);
        }
        let max_entries = checked_map_max_entries(map_fd)?;
        let page_size = cpu::page_size();
        if page_cnt.checked_mul(page_size).and_then(|s| s.checked_add(page_size)).is_none() {
            log::warn(format_args!("page count {page_cnt} overflows the mapping size"));
            return Err(Errno::INVAL);
        }
        let epoll = sys::epoll_create().inspect_err(|e| {
            log::warn(format_args!("failed to create epoll instance: {e}"));
        })?;
        let skip_offline = matches!(cpus, CpuSelection::AllOnline);
        let slots: Vec<(c_int, c_int)> = match cpus {
            CpuSelection::Explicit(pairs) => pairs,
            CpuSelection::AllOnline => {
                let mut n = cpu::possible_cpu_count()?;
                if max_entries != 0 && (max_entries as usize) < n {
                    n = max_entries as usize;
                }
                (0..n as c_int).map(|c| (c, c)).collect()
            }
        };
        let mut pb = Box::new(PerfBuffer { map_fd, callbacks, bufs: Vec::new(), events: Vec::new(), epoll });
        pb.bufs.try_reserve_exact(slots.len()).map_err(|_| Errno::NOMEM)?;
        pb.events.try_reserve_exact(slots.len()).map_err(|_| Errno::NOMEM)?;
        pb.events.resize(slots.len(), libc::epoll_event { events: 0, u64: 0 });
        let online = cpu::online_mask().inspect_err(|e| {
            log::warn(format_args!("failed to get online CPU mask: {e}"));
        })?;
        for &(cpu, map_key) in &slots {
            let is_online = usize::try_from(cpu).ok().and_then(|c| online.get(c)).copied().unwrap_or(false);
            if skip_offline && !is_online {
                continue;
            }
            pb.add_cpu(cpu, map_key, attr, page_cnt, page_size)?;
        }
        Ok(pb)
    }

    /// Opens, maps and enables one CPU's event, then publishes it in the map
    /// and the epoll set (libbpf's steps c–h). The buffer is stored before
    /// the map update so that a failure there still deletes the key on
    /// teardown, as libbpf does.
    fn add_cpu(
        &mut self,
        cpu: c_int,
        map_key: c_int,
        attr: AttrSource<'_>,
        page_cnt: usize,
        page_size: usize,
    ) -> Result<()> {
        let fd = sys::perf_event_open(attr, cpu).inspect_err(|e| {
            log::warn(format_args!("failed to open perf buffer event on cpu #{cpu}: {e}"));
        })?;
        let ring = PerfRing::map(fd.as_raw_fd(), page_size, page_cnt).inspect_err(|e| {
            log::warn(format_args!("failed to mmap perf buffer on cpu #{cpu}: {e}"));
            let _ = sys::perf_ioctl(&fd, PERF_EVENT_IOC_DISABLE, 0);
        })?;
        if let Err(e) = sys::perf_ioctl(&fd, PERF_EVENT_IOC_ENABLE, 0) {
            log::warn(format_args!("failed to enable perf buffer event on cpu #{cpu}: {e}"));
            drop(ring);
            let _ = sys::perf_ioctl(&fd, PERF_EVENT_IOC_DISABLE, 0);
            return Err(e);
        }
        let perf_fd = fd.as_raw_fd();
        let index = self.bufs.len();
        self.bufs.push(CpuBuf { cpu, map_key, fd, ring, stats: DispatchStats::default() });
        sys::map_update_u32(self.map_fd, map_key as u32, perf_fd as u32).inspect_err(|e| {
            log::warn(format_args!("failed to set cpu #{cpu}, key {map_key} -> perf FD {perf_fd}: {e}"));
        })?;
        sys::epoll_add(&self.epoll, perf_fd, index as u64).inspect_err(|e| {
            log::warn(format_args!("failed to epoll_ctl cpu #{cpu} perf FD {perf_fd}: {e}"));
        })
    }

    /// The epoll fd over all rings.
    pub fn epoll_fd(&self) -> RawFd {
        self.epoll.as_raw_fd()
    }

    /// Number of rings actually set up.
    pub fn buffer_cnt(&self) -> usize {
        self.bufs.len()
    }

    /// The ring at `idx`, or EINVAL past the end.
    pub fn buf(&self, idx: usize) -> Result<&CpuBuf> {
        self.bufs.get(idx).ok_or(Errno::INVAL)
    }

    /// All rings, in index order.
    pub fn bufs(&self) -> &[CpuBuf] {
        &self.bufs
    }

    /// Drains ring `idx` (libbpf's `perf_buffer__process_records`): 0 when
    /// the batch ended normally or a handler said DONE, else the handler's
    /// value. Like libbpf, `errno` is left at ENOENT after a normal drain.
    fn process_records(&mut self, idx: usize) -> c_int {
        let PerfBuffer { bufs, callbacks, .. } = self;
        let buf = &mut bufs[idx];
        let (cpu, stats) = (buf.cpu, &mut buf.stats);
        let ret = libbpf_err(buf.ring.drain(|rec| callbacks.dispatch(cpu, rec, stats)));
        if ret == LIBBPF_PERF_EVENT_CONT { 0 } else { ret }
    }

    /// Waits up to `timeout_ms` for rings the kernel signalled, drains each,
    /// and returns how many were signalled (libbpf's `perf_buffer__poll`).
    pub fn poll(&mut self, timeout_ms: c_int) -> c_int {
        let cnt = match sys::epoll_wait(self.epoll.as_raw_fd(), &mut self.events, self.bufs.len(), timeout_ms)
        {
            Ok(cnt) => cnt,
            Err(e) => return -e.0,
        };
        for i in 0..cnt {
            let idx = self.events[i].u64 as usize;
            let err = self.process_records(idx);
            if err != 0 {
                log::warn(format_args!("error while processing records: {err}"));
                return libbpf_err(err);
            }
        }
        cnt as c_int
    }

    /// Drains every ring in index order (libbpf's `perf_buffer__consume`).
    pub fn consume(&mut self) -> c_int {
        for idx in 0..self.bufs.len() {
            let err = self.process_records(idx);
            if err != 0 {
                log::warn(format_args!("perf_buffer: failed to process records in buffer #{idx}: {err}"));
                return libbpf_err(err);
            }
        }
        0
    }

    /// Drains ring `idx` (libbpf's `perf_buffer__consume_buffer`).
    pub fn consume_buffer(&mut self, idx: usize) -> Result<c_int> {
        self.buf(idx)?;
        Ok(self.process_records(idx))
    }
}

impl Drop for PerfBuffer {
    /// libbpf's `perf_buffer__free` order: each ring, then the epoll fd.
    fn drop(&mut self) {
        for buf in self.bufs.drain(..) {
            buf.teardown(self.map_fd);
        }
    }
}

/// libbpf's best-effort map check: returns `max_entries` (0 when unknown).
fn checked_map_max_entries(map_fd: RawFd) -> Result<u32> {
    match sys::map_info(map_fd) {
        Ok(info) if info.map_type != BPF_MAP_TYPE_PERF_EVENT_ARRAY => {
            log::warn(format_args!("map '{}' should be BPF_MAP_TYPE_PERF_EVENT_ARRAY", info.name));
            Err(Errno::INVAL)
        }
        Ok(info) => Ok(info.max_entries),
        Err(Errno::INVAL) => {
            log::debug(format_args!(
                "failed to get map info for FD {map_fd}; API not supported? Ignoring..."
            ));
            Ok(0)
        }
        Err(e) => {
            log::warn(format_args!("failed to get map info for map FD {map_fd}: {e}"));
            Err(e)
        }
    }
}

/// The attr `perf_buffer__new` opens with.
pub fn default_attr(sample_period: u32) -> PerfEventAttr {
    PerfEventAttr::bpf_output(sample_period)
}
