//! Latency and loss on a network namespace's outgoing packets, without `sch_netem` (the
//! kernels here are built without it): an iptables rule in the namespace sends every packet
//! leaving by a non-loopback interface to a netfilter queue, and a thread of this process,
//! switched into the namespace, holds each packet for the delay, then accepts it, or drops it
//! with the loss probability. Packets leave in the order they came (one FIFO, one delay), so a
//! TCP stream sees latency and loss, not reordering.
//!
//! `--queue-bypass` on the rule: once the thread is gone, packets pass untouched; dropping the
//! [`Delay`] removes the rule as well.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum DelayError {
    #[error("opening network namespace {ns}: {source}")]
    Namespace { ns: String, source: std::io::Error },
    #[error("the netfilter queue {queue} in {ns}: {source}")]
    Queue {
        ns: String,
        queue: u16,
        source: std::io::Error,
    },
    #[error("`{command}` failed: {message}")]
    Command { command: String, message: String },
    #[error("loss must be a probability in [0, 1], not {0}")]
    Loss(f64),
}

/// Latency and loss on one namespace's outgoing packets, until dropped.
pub struct Delay {
    ns: String,
    rule: Vec<String>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    passed: Arc<std::sync::atomic::AtomicU64>,
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl std::fmt::Debug for Delay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delay")
            .field("ns", &self.ns)
            .field("passed", &self.passed())
            .field("dropped", &self.dropped())
            .finish()
    }
}

fn iptables_in(ns: &str, args: &[String]) -> Result<(), DelayError> {
    let mut command = std::process::Command::new("ip");
    command
        .args(["netns", "exec", ns, "iptables", "-w"])
        .args(args);
    let shown = format!("ip netns exec {ns} iptables {}", args.join(" "));
    let out = command.output().map_err(|e| DelayError::Command {
        command: shown.clone(),
        message: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(DelayError::Command {
            command: shown,
            message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// A small, seeded generator for the loss decisions (xorshift64*; nothing here needs more).
struct Coin(u64);

impl Coin {
    fn next_f64(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let x = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D);
        (x >> 11) as f64 / (1u64 << 53) as f64
    }
}

impl Delay {
    /// Holds every packet leaving namespace `ns` (by any interface but `lo`) for `delay`, and
    /// drops a share `loss` of them (decided by a generator seeded with `seed`). `queue` is the
    /// netfilter queue number: unique per namespace among the delays running at once.
    pub fn start(
        ns: &str,
        queue: u16,
        delay: Duration,
        loss: f64,
        seed: u64,
    ) -> Result<Delay, DelayError> {
        Self::start_to(ns, queue, &[], delay, loss, seed)
    }

    /// As [`start`](Self::start), but only for packets to the addresses in `to` (every packet
    /// leaving by a non-loopback interface when `to` is empty): latency between two groups of
    /// hosts, with the rest of the namespace's traffic untouched.
    pub fn start_to(
        ns: &str,
        queue: u16,
        to: &[std::net::Ipv4Addr],
        delay: Duration,
        loss: f64,
        seed: u64,
    ) -> Result<Delay, DelayError> {
        if !(0.0..=1.0).contains(&loss) {
            return Err(DelayError::Loss(loss));
        }
        // The queue is bound in the namespace before the rule sends packets to it.
        let netns = std::fs::File::open(format!("/run/netns/{ns}")).map_err(|source| {
            DelayError::Namespace {
                ns: ns.to_string(),
                source,
            }
        })?;
        let stop = Arc::new(AtomicBool::new(false));
        let passed = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), DelayError>>();
        let thread = {
            let (stop, passed, dropped, ns_name) = (
                stop.clone(),
                passed.clone(),
                dropped.clone(),
                ns.to_string(),
            );
            std::thread::Builder::new()
                .name(format!("netdelay-{ns}"))
                .spawn(move || {
                    // This thread only: the rest of the process stays where it is.
                    if let Err(e) = rustix::thread::move_into_link_name_space(
                        std::os::fd::AsFd::as_fd(&netns),
                        Some(rustix::thread::LinkNameSpaceType::Network),
                    ) {
                        let _ = ready_tx.send(Err(DelayError::Namespace {
                            ns: ns_name,
                            source: e.into(),
                        }));
                        return;
                    }
                    let queue_err = |source: std::io::Error| DelayError::Queue {
                        ns: ns_name.clone(),
                        queue,
                        source,
                    };
                    let mut q = match nfq::Queue::open()
                        .and_then(|mut q| q.bind(queue).map(|()| q))
                        .and_then(|mut q| q.set_copy_range(queue, 0).map(|()| q))
                        .and_then(|mut q| q.set_queue_max_len(queue, 65_536).map(|()| q))
                    {
                        Ok(q) => q,
                        Err(e) => {
                            let _ = ready_tx.send(Err(queue_err(e)));
                            return;
                        }
                    };
                    q.set_nonblocking(true);
                    let _ = ready_tx.send(Ok(()));
                    hold(&mut q, delay, loss, seed, &stop, &passed, &dropped);
                })
                .map_err(|e| DelayError::Command {
                    command: "spawn the delay thread".into(),
                    message: e.to_string(),
                })?
        };
        let started = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| {
                Err(DelayError::Command {
                    command: "the delay thread".into(),
                    message: "did not start within 10 s".into(),
                })
            });
        let mut rule: Vec<String> = ["OUTPUT", "!", "-o", "lo"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if !to.is_empty() {
            // One list: iptables makes a rule per address, and `-D` with it removes them all.
            let list = to
                .iter()
                .map(|a| a.to_string())
                .collect::<Vec<_>>()
                .join(",");
            rule.extend(["-d".to_string(), list]);
        }
        rule.extend(
            [
                "-j",
                "NFQUEUE",
                "--queue-num",
                &queue.to_string(),
                "--queue-bypass",
            ]
            .iter()
            .map(|s| s.to_string()),
        );
        let mut this = Delay {
            ns: ns.to_string(),
            rule: Vec::new(),
            stop,
            thread: Some(thread),
            passed,
            dropped,
        };
        started?;
        let mut insert = vec!["-I".to_string()];
        insert.extend(rule.iter().cloned());
        iptables_in(ns, &insert)?;
        this.rule = rule;
        Ok(this)
    }

    /// Packets accepted after their delay so far.
    pub fn passed(&self) -> u64 {
        self.passed.load(Ordering::Relaxed)
    }

    /// Packets dropped (the loss) so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The thread's loop: packets in, each accepted `delay` after it came (or dropped).
fn hold(
    q: &mut nfq::Queue,
    delay: Duration,
    loss: f64,
    seed: u64,
    stop: &AtomicBool,
    passed: &std::sync::atomic::AtomicU64,
    dropped: &std::sync::atomic::AtomicU64,
) {
    let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
    let mut coin = Coin(seed | 1);
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let mut got = false;
        // Everything waiting now.
        loop {
            match q.recv() {
                Ok(msg) => {
                    got = true;
                    held.push_back((Instant::now() + delay, msg));
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => break,
            }
        }
        let now = Instant::now();
        while let Some((due, _)) = held.front() {
            if *due > now && !stopping {
                break;
            }
            let Some((_, mut msg)) = held.pop_front() else {
                break;
            };
            if !stopping && loss > 0.0 && coin.next_f64() < loss {
                msg.set_verdict(nfq::Verdict::Drop);
                dropped.fetch_add(1, Ordering::Relaxed);
            } else {
                msg.set_verdict(nfq::Verdict::Accept);
                passed.fetch_add(1, Ordering::Relaxed);
            }
            // A verdict that cannot be sent leaves the packet to the kernel's queue timeout.
            let _ = q.verdict(msg);
        }
        if stopping {
            return;
        }
        if !got {
            // The next due packet or a short nap, whichever is first: the queue is polled.
            let nap = held
                .front()
                .map(|(due, _)| due.saturating_duration_since(Instant::now()))
                .unwrap_or(Duration::from_millis(1))
                .min(Duration::from_millis(1));
            std::thread::sleep(nap);
        }
    }
}

impl Drop for Delay {
    fn drop(&mut self) {
        // The rule first (packets pass untouched), then the thread lets the held ones go.
        if !self.rule.is_empty() {
            let mut delete = vec!["-D".to_string()];
            delete.extend(self.rule.iter().cloned());
            let _ = iptables_in(&self.ns, &delete);
        }
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
