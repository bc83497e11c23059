//! The end-of-run summary every command prints: per CPU, where the
//! records went (the loss identity's buckets) and how big the ring had to
//! be (sizing from evidence), and the totals.

use perfbuf::{OutputCounts, PerfBuffer, RingHealth, RingStats, Threading};

/// Totals over every ring.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub delivered: u64,
    pub lost: u64,
    pub kernel: u64,
    pub output_failed: u64,
    pub dropped: u64,
    /// Known only with perfbuf.bpf.h's counts.
    pub produced: Option<u64>,
}

/// Every ring's figures and health, in ring order, and what perfbuf.bpf.h
/// counted on CPUs no ring reads (their outputs all refused: no slot).
#[derive(Clone, Debug, Default)]
pub struct Figures {
    pub rings: Vec<(RingStats, RingHealth)>,
    pub unread: Vec<(usize, OutputCounts)>,
}

impl Figures {
    /// The figures of `pb` now.
    pub fn of<T: Threading>(pb: &PerfBuffer<'_, T>) -> Figures {
        let rings: Vec<_> =
            (0..pb.rings()).filter_map(|i| Some((pb.stats(i).ok()?, pb.health(i).ok()?))).collect();
        let unread = match pb.output_counts() {
            // A ring buffer's one ring takes every CPU's records.
            _ if pb.is_ring_buffer() => Vec::new(),
            Some(Ok(all)) => all
                .into_iter()
                .enumerate()
                .filter(|(cpu, c)| c.calls > 0 && !rings.iter().any(|(s, _)| s.cpu == *cpu as i32))
                .collect(),
            _ => Vec::new(),
        };
        Figures { rings, unread }
    }

    /// The totals over every ring and every CPU not read.
    pub fn totals(&self) -> Totals {
        let mut t = Totals::default();
        for (s, _) in &self.rings {
            t.delivered += s.delivered();
            t.lost += s.lost_total();
            t.kernel += s.lost;
            t.output_failed += s.output_failed;
            t.dropped += s.dropped;
        }
        for (_, c) in &self.unread {
            t.lost += c.failed;
            t.output_failed += c.failed;
        }
        t.produced = if self.rings.is_empty() {
            None
        } else {
            self.rings
                .iter()
                .map(|(s, _)| s.produced)
                .sum::<Option<u64>>()
                .map(|p| p + self.unread.iter().map(|(_, c)| c.calls).sum::<u64>())
        };
        t
    }

    /// The summary's lines after its first: two per ring (see
    /// [`ring_lines`]), one per CPU not read.
    pub fn lines(&self, pages: usize) -> Vec<String> {
        let mut lines = ring_lines(&self.rings, pages);
        for (cpu, c) in &self.unread {
            lines.push(format!(
                "  cpu {cpu}: not read: {} outputs, {} refused at the BPF side (no ring: give --cpu with it)",
                c.calls, c.failed
            ));
        }
        lines
    }
}

/// `N delivered, M lost (kernel K, refused at the BPF side R, dropped D)`,
/// the refusals only where perfbuf.bpf.h counted them.
fn buckets(delivered: u64, lost: u64, kernel: u64, failed: Option<u64>, dropped: u64) -> String {
    buckets_named("kernel", delivered, lost, kernel, failed, dropped)
}

/// [`buckets`] with the first bucket named `first` (a ring buffer's is
/// what the reader dropped while paused: the kernel counts none).
fn buckets_named(
    first: &str,
    delivered: u64,
    lost: u64,
    kernel: u64,
    failed: Option<u64>,
    dropped: u64,
) -> String {
    let refused = failed.map(|n| format!(", refused at the BPF side {n}")).unwrap_or_default();
    format!("{delivered} delivered, {lost} lost ({first} {kernel}{refused}, dropped {dropped})")
}

/// The totals as the summary's first line says them.
pub fn totals_text(t: &Totals) -> String {
    let mut text = buckets(t.delivered, t.lost, t.kernel, t.produced.map(|_| t.output_failed), t.dropped);
    if let Some(p) = t.produced {
        text.push_str(&format!(", of {p} produced"));
    }
    text
}

/// Two lines per ring: its records, and its size against what it held.
pub fn ring_lines(rings: &[(RingStats, RingHealth)], pages: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for (s, h) in rings {
        let failed = s.produced.map(|_| s.output_failed);
        // A ring buffer's one ring is no CPU's.
        let (name, first) =
            if s.cpu < 0 { ("ring buffer".into(), "paused") } else { (format!("cpu {}", s.cpu), "kernel") };
        let mut line = format!(
            "  {name}: {} records, {} bytes, {}",
            s.records,
            s.bytes,
            buckets_named(first, s.delivered(), s.lost_total(), s.lost, failed, s.dropped)
        );
        if let Some(p) = s.produced {
            line.push_str(&format!(", of {p} produced"));
        }
        lines.push(line);
        lines.push(format!("  {name}: {}", sizing(h, pages)));
    }
    lines
}

/// `peak backlog B of S bytes; the smallest ring that would have held it:
/// N pages` (the backlog counting the records lost meanwhile, if any).
fn sizing(h: &RingHealth, pages: usize) -> String {
    let counted = if h.needed_bytes > h.peak_pending_bytes {
        format!(", {} bytes counting the records lost meanwhile", h.needed_bytes)
    } else {
        String::new()
    };
    let plural = |n: usize| if n == 1 { "page" } else { "pages" };
    let advice = match h.suggested_pages.cmp(&pages) {
        core::cmp::Ordering::Greater => format!(" (now {pages}: give --pages {})", h.suggested_pages),
        _ => format!(" (now {pages})"),
    };
    format!(
        "peak backlog {} of {} bytes{counted}; the smallest ring that would have held it: {} {}{advice}",
        h.peak_pending_bytes,
        h.data_size,
        h.suggested_pages,
        plural(h.suggested_pages)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn says_every_bucket_and_the_size_needed() {
        let mut s = RingStats::default();
        s.cpu = 0;
        s.records = 100;
        s.samples = 100;
        s.lost = 40;
        s.dropped = 5;
        let mut h = RingHealth::default();
        h.peak_pending_bytes = 32_000;
        h.data_size = 32_768;
        h.needed_bytes = 40_000;
        h.suggested_pages = 16;
        let lines = ring_lines(&[(s, h)], 8);
        assert_eq!(lines[0], "  cpu 0: 100 records, 0 bytes, 95 delivered, 45 lost (kernel 40, dropped 5)");
        assert_eq!(
            lines[1],
            "  cpu 0: peak backlog 32000 of 32768 bytes, 40000 bytes counting the records lost meanwhile; the \
             smallest ring that would have held it: 16 pages (now 8: give --pages 16)"
        );
        s.produced = Some(150);
        s.output_failed = 5;
        let t = Figures { rings: vec![(s, h)], unread: Vec::new() }.totals();
        assert_eq!(
            totals_text(&t),
            "95 delivered, 50 lost (kernel 40, refused at the BPF side 5, dropped 5), of 150 produced"
        );
    }
}
