//! What `bench produce` reports: one JSON object (or table row) per run.

use super::{CpuSnapshot, Interval, ProduceBenchArgs, ProducerOutcome, Roles};
use crate::cpu::CpuTime;
use crate::latency::LatencySummary;
use serde::Serialize;

/// Round trips measured for the latency floor (about a second's worth).
const ROUND_TRIPS: u32 = 4000;

/// One benchmark run's result. Every rate and CPU figure covers the measured interval (after
/// the warm-up); CPU figures are `null` when the processes cannot be seen (`--join`).
#[derive(Debug, Serialize)]
pub struct ProduceBenchReport {
    /// What the producers spoke: `native` or `kafka`.
    pub protocol: super::Protocol,
    /// Whether every client and peer connection spoke TLS (the one-sided path stays plain).
    pub tls: bool,
    /// Whether every connection authenticated and every produce was checked against a rule.
    pub authenticated: bool,
    pub producers: u32,
    pub record_bytes: usize,
    pub batch_bytes: u32,
    pub logs: u32,
    pub streamlets: u32,
    pub replicas: u32,
    pub replication: String,
    pub brokers: u32,
    pub linger_ms: u64,
    pub max_in_flight: u32,
    /// Open loop: the offered load, records/s (null in closed loop).
    pub rate: Option<u64>,
    pub records_acked: u64,
    pub records_failed: u64,
    /// Records acknowledged in the measured interval (open loop: of those scheduled in it).
    pub measured_records: u64,
    pub elapsed_s: f64,
    pub records_per_sec: f64,
    pub mib_per_sec: f64,
    /// Record latency, from the send (open loop: the scheduled send) to the acknowledgement.
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub p999_us: Option<u64>,
    pub max_us: Option<u64>,
    /// Open loop: how late the load generator itself sent records (part of the latency).
    pub send_lag_p50_us: Option<u64>,
    pub send_lag_p99_us: Option<u64>,
    /// Every broker process together.
    pub cpu_seconds_per_gib: Option<f64>,
    /// The streamlets' owners.
    pub primary_cpu_seconds_per_gib: Option<f64>,
    pub primary_user_cpu_seconds_per_gib: Option<f64>,
    pub primary_system_cpu_seconds_per_gib: Option<f64>,
    /// What holding copies costs a backup, per GiB it receives: the CPU of the brokers that
    /// hold copies of the stream's logs and own none of its streamlets, over the bytes they
    /// received (bytes produced × R × their share of the copies). Idle brokers are left out;
    /// null when R = 0 or when every copy sits on a broker that also owns streamlets (its
    /// backup work cannot be told from its primary work: see `backup_copies_on_owners`).
    pub backup_cpu_seconds_per_gib: Option<f64>,
    pub backup_user_cpu_seconds_per_gib: Option<f64>,
    pub backup_system_cpu_seconds_per_gib: Option<f64>,
    /// Of the backup's CPU, its software NIC threads' (one-sided writes landing in place; the
    /// rest is closing, flushing and re-zeroing replicas, and membership). Null in RPC mode.
    pub backup_nic_user_cpu_seconds_per_gib: Option<f64>,
    pub backup_nic_system_cpu_seconds_per_gib: Option<f64>,
    /// The brokers measured as backups (they hold copies and own nothing of the stream).
    pub backup_processes: Option<usize>,
    /// Copies (log × replica) on brokers that also own streamlets: not in the backup figure.
    pub backup_copies_on_owners: Option<usize>,
    /// Brokers that neither own a streamlet nor hold a copy.
    pub idle_brokers: Option<usize>,
    /// This process: the producers (and the benchmark's own bookkeeping).
    pub client_cpu_seconds_per_gib: Option<f64>,
    pub client_user_cpu_seconds_per_gib: Option<f64>,
    pub client_system_cpu_seconds_per_gib: Option<f64>,
    pub client_cpu_ns_per_record: Option<f64>,
    /// The kernel's floor for the same bytes to R receivers (R > 0; see `floor`).
    pub floor_cpu_seconds_per_gib: Option<f64>,
    pub floor_user_cpu_seconds_per_gib: Option<f64>,
    pub floor_system_cpu_seconds_per_gib: Option<f64>,
    /// `cpu_seconds_per_gib` over `floor_cpu_seconds_per_gib`.
    pub broker_cpu_over_floor: Option<f64>,
    /// Open loop: the fewest loopback trips an ack at this R takes on this machine, between
    /// idle threads doing nothing else (a ping-pong at R = 0; see `floor::round_trip`).
    pub floor_round_trip_p50_us: Option<u64>,
    pub floor_round_trip_p99_us: Option<u64>,
}

impl ProduceBenchReport {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        args: &ProduceBenchArgs,
        brokers: u32,
        records_acked: u64,
        outcome: &ProducerOutcome,
        interval: Interval,
        roles: &Roles,
        cpu: CpuSnapshot,
    ) -> Self {
        let bytes = interval.records as f64 * args.record_bytes as f64;
        let latency = LatencySummary::of(&outcome.latency_us);
        let lag = LatencySummary::of(&outcome.send_lag_us);
        let seen = !roles.primaries.is_empty();
        let primary = cpu.primaries.per_gib(bytes).filter(|_| seen);
        let holders = roles.backups.as_ref().filter(|_| args.replicas > 0);
        // The bytes the measured backups received: each record goes to R copies, and they
        // hold `share` of all copies.
        let received = holders
            .filter(|b| b.share > 0.0)
            .map(|b| bytes * f64::from(args.replicas) * b.share);
        let backup = received.and_then(|received| cpu.backups.per_gib(received));
        let backup_nic = received
            .filter(|_| args.replication == "one-sided")
            .and_then(|received| cpu.backups_nic.per_gib(received));
        let brokers_cpu = (cpu.primaries + cpu.others).per_gib(bytes).filter(|_| seen);
        let client = cpu.client.per_gib(bytes);
        Self {
            protocol: args.protocol,
            tls: args.tls,
            authenticated: args.authenticate,
            producers: args.producers,
            record_bytes: args.record_bytes,
            batch_bytes: args.batch_bytes,
            logs: args.logs,
            streamlets: args.streamlets,
            replicas: args.replicas,
            replication: args.replication.clone(),
            brokers,
            linger_ms: args.linger_ms(),
            max_in_flight: args.max_in_flight,
            rate: args.rate,
            records_acked,
            records_failed: outcome.failed,
            measured_records: interval.records,
            elapsed_s: interval.elapsed_s,
            records_per_sec: interval.records as f64 / interval.elapsed_s,
            mib_per_sec: bytes / f64::from(1u32 << 20) / interval.elapsed_s,
            p50_us: latency.map(|l| l.p50_us),
            p99_us: latency.map(|l| l.p99_us),
            p999_us: latency.map(|l| l.p999_us),
            max_us: latency.map(|l| l.max_us),
            send_lag_p50_us: lag.filter(|_| args.rate.is_some()).map(|l| l.p50_us),
            send_lag_p99_us: lag.filter(|_| args.rate.is_some()).map(|l| l.p99_us),
            cpu_seconds_per_gib: brokers_cpu.map(CpuTime::total_s),
            primary_cpu_seconds_per_gib: primary.map(CpuTime::total_s),
            primary_user_cpu_seconds_per_gib: primary.map(|c| c.user_s),
            primary_system_cpu_seconds_per_gib: primary.map(|c| c.system_s),
            backup_cpu_seconds_per_gib: backup.map(CpuTime::total_s),
            backup_user_cpu_seconds_per_gib: backup.map(|c| c.user_s),
            backup_system_cpu_seconds_per_gib: backup.map(|c| c.system_s),
            backup_nic_user_cpu_seconds_per_gib: backup_nic.map(|c| c.user_s),
            backup_nic_system_cpu_seconds_per_gib: backup_nic.map(|c| c.system_s),
            backup_processes: holders.map(|b| b.pids.len()),
            backup_copies_on_owners: holders.map(|b| b.copies_on_owners),
            idle_brokers: holders.map(|b| b.idle),
            client_cpu_seconds_per_gib: client.map(CpuTime::total_s),
            client_user_cpu_seconds_per_gib: client.map(|c| c.user_s),
            client_system_cpu_seconds_per_gib: client.map(|c| c.system_s),
            client_cpu_ns_per_record: (interval.records > 0)
                .then(|| cpu.client.total_s() * 1e9 / interval.records as f64),
            floor_cpu_seconds_per_gib: None,
            floor_user_cpu_seconds_per_gib: None,
            floor_system_cpu_seconds_per_gib: None,
            broker_cpu_over_floor: None,
            floor_round_trip_p50_us: None,
            floor_round_trip_p99_us: None,
        }
    }

    /// Measures the kernel's floor for this run's bytes (at least 256 MiB, at most 1 GiB per
    /// receiver, so the CPU clock's 10 ms ticks do not matter) and relates the brokers to it.
    pub(super) fn add_floor(&mut self, args: &ProduceBenchArgs) -> Result<(), String> {
        // The bytes a record takes in a batch: its value plus Kafka's per-record framing.
        let record_wire_bytes =
            tailstream_wire::records::RecordBatchBuilder::record_len_bound(0, args.record_bytes, 0);
        let wire_bytes = (self.measured_records as f64 * record_wire_bytes as f64) as u64;
        let bytes = wire_bytes.clamp(256 << 20, 1 << 30);
        let floor = crate::floor::measure(self.replicas, args.batch_bytes as usize, bytes)
            .map_err(|e| format!("measuring the kernel's floor: {e}"))?;
        // Per GiB of record data, like the brokers' figures.
        let record_bytes = bytes as f64 * args.record_bytes as f64 / record_wire_bytes as f64;
        let per_gib = floor.cpu.per_gib(record_bytes);
        self.floor_cpu_seconds_per_gib = per_gib.map(CpuTime::total_s);
        self.floor_user_cpu_seconds_per_gib = per_gib.map(|c| c.user_s);
        self.floor_system_cpu_seconds_per_gib = per_gib.map(|c| c.system_s);
        self.broker_cpu_over_floor = self
            .cpu_seconds_per_gib
            .zip(self.floor_cpu_seconds_per_gib)
            .filter(|(_, floor)| *floor > 0.0)
            .map(|(brokers, floor)| brokers / floor);
        Ok(())
    }

    /// Measures a round trip's floor on this machine (open loop: it bounds the latencies).
    pub(super) fn add_round_trip_floor(&mut self) -> Result<(), String> {
        let trip = crate::floor::round_trip(self.replicas, ROUND_TRIPS)
            .map_err(|e| format!("measuring a loopback round trip: {e}"))?;
        self.floor_round_trip_p50_us = Some(trip.p50_us);
        self.floor_round_trip_p99_us = Some(trip.p99_us);
        Ok(())
    }

    pub fn table_row(&self) -> String {
        let us = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        let secs = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
        let load = self
            .rate
            .map_or("closed loop".into(), |r| format!("open {r}/s"));
        format!(
            "R={} {:>9} {:<6}{}{} {:>3} producers {:>2} logs {:>7} B batches {load}: {:>11.0} records/s \
             {:>7.1} MiB/s  latency p50 {:>6} p99 {:>6} p999 {:>6} max {:>7} us  cpu s/GiB: \
             brokers {} primary {} backup {} client {} floor {} (x{})  round trip p50 {} us",
            self.replicas,
            self.replication,
            self.protocol.name(),
            if self.tls { " tls" } else { "" },
            if self.authenticated { " auth" } else { "" },
            self.producers,
            self.logs,
            self.batch_bytes,
            self.records_per_sec,
            self.mib_per_sec,
            us(self.p50_us),
            us(self.p99_us),
            us(self.p999_us),
            us(self.max_us),
            secs(self.cpu_seconds_per_gib),
            secs(self.primary_cpu_seconds_per_gib),
            secs(self.backup_cpu_seconds_per_gib),
            secs(self.client_cpu_seconds_per_gib),
            secs(self.floor_cpu_seconds_per_gib),
            secs(self.broker_cpu_over_floor),
            us(self.floor_round_trip_p50_us),
        )
    }
}
