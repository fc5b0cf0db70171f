//! numactl's command line semantics: options take effect one by one in the order
//! given, and the order rules of numactl 2.0.16 (its `numactl.c`) decide which
//! combinations are refused, with the same words:
//!
//! - one memory policy only ("Conflicting policies"); `--membind` and `--localalloc`
//!   claim the policy before their nodes are read, the others after;
//! - `--all` before any node or CPU list; `--balancing` and `--hardware` before any
//!   policy; `--show` and `--hardware` answer at once and end the run;
//! - `--length`, `--offset`, `--shmmode`, `--huge` before `--shm`/`--file`; a policy
//!   after them (it then applies to the region); `--touch`, `--dump`, `--dump-nodes`
//!   after them; no CPU binding with shared memory, and no command either;
//! - `same` as a node list repeats the previous node list.
//!
//! The side effects (policies, bindings, regions) are the library's
//! [`policy`](crate::policy) and [`shm`](crate::shm); [`Session::run`] reports what
//! remains to do: nothing, or run the command.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::policy::{self, MemPolicy, Mode, PolicyError};
use crate::shm::{self, Region, Settings, ShmError};
use crate::{hardware, show, Allowed, IdSet, Topology, TopologyError};

/// One option of numactl's command line, with its argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// `--all`: node and CPU lists may name what this process's cpuset excludes.
    All,
    /// `--balancing`: a later `--membind` keeps NUMA balancing among its nodes.
    Balancing,
    /// `--show`: print the policy and bindings now, and stop.
    Show,
    /// `--hardware`: print the machine now (as JSON with `--json`), and stop.
    Hardware {
        /// JSON instead of numactl's text.
        json: bool,
    },
    /// `--interleave NODES`.
    Interleave(String),
    /// `--weighted-interleave NODES` (Linux 6.9+; not in numactl 2.0.16).
    WeightedInterleave(String),
    /// `--preferred NODE`.
    Preferred(String),
    /// `--preferred-many NODES`.
    PreferredMany(String),
    /// `--membind NODES`.
    Membind(String),
    /// `--localalloc`.
    LocalAlloc,
    /// `--cpunodebind NODES` (or its old name `--cpubind`).
    CpuNodeBind(String),
    /// `--physcpubind CPUS`.
    PhysCpuBind(String),
    /// `--shm KEYFILE`: a System V segment keyed by a file.
    Shm(PathBuf),
    /// `--file FILE`: a shared file (tmpfs, hugetlbfs).
    File(PathBuf),
    /// `--length SIZE` of the region.
    Length(String),
    /// `--offset SIZE` into the segment or file.
    Offset(String),
    /// `--shmmode MODE` (octal) for what `--shm`/`--file` create.
    ShmMode(String),
    /// `--shmid ID` for ftok(3).
    ShmId(String),
    /// `--strict`: fail when pages of the region already lie elsewhere.
    Strict,
    /// `--huge`: a segment of huge pages.
    Huge,
    /// `--touch`: fault the region in under its policy.
    Touch,
    /// `--dump`: print the region's policies.
    Dump,
    /// `--dump-nodes`: print the region's nodes.
    DumpNodes,
    /// `--verify` (undocumented in numactl): check the region against the policy.
    Verify,
}

/// Why a run stops.
#[derive(Debug, thiserror::Error)]
pub enum NumactlError {
    /// A command line numactl refuses (numactl prints its usage after these).
    #[error("{0}")]
    Usage(String),
    /// The machine could not be read.
    #[error(transparent)]
    Topology(#[from] TopologyError),
    /// A policy or binding the kernel refused.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// A shared memory region could not be set up or read.
    #[error(transparent)]
    Shm(#[from] ShmError),
    /// This process's policy or bindings could not be read (`--show`).
    #[error(transparent)]
    Show(#[from] show::ShowError),
    /// Writing the output failed.
    #[error("writing the output: {0}")]
    Output(#[from] std::io::Error),
}

fn usage(message: impl Into<String>) -> NumactlError {
    NumactlError::Usage(message.into())
}

/// What is left to do after the options.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Exit with this status (after `--show`, `--hardware` or a shared memory setup).
    Exit(u8),
    /// Run the command (program and arguments) under the policy now in effect.
    Exec(Vec<OsString>),
}

/// The state numactl keeps while it walks its options.
pub struct Session<'a> {
    root: &'a Path,
    topology: Option<Topology>,
    /// `--all` seen.
    parse_all: bool,
    /// A node or CPU list has been read (so `--all` is too late).
    parsed_a_list: bool,
    /// The policy set so far.
    policy: Option<Mode>,
    /// The nodes of the last policy, for `--verify`.
    policy_nodes: IdSet,
    balancing: bool,
    /// The last node list, for `same`.
    last_nodes: Option<String>,
    /// The last region option before `--shm`/`--file` (they refuse a command).
    region_option: Option<&'static str>,
    settings: Settings,
    region: Option<Region>,
    cpus_bound: bool,
    strict: bool,
    exit_status: u8,
}

impl<'a> Session<'a> {
    /// A session reading sysfs and procfs under `root` (`/` normally).
    pub fn new(root: &'a Path) -> Session<'a> {
        Session {
            root,
            topology: None,
            parse_all: false,
            parsed_a_list: false,
            policy: None,
            policy_nodes: IdSet::new(),
            balancing: false,
            last_nodes: None,
            region_option: None,
            settings: Settings::default(),
            region: None,
            cpus_bound: false,
            strict: false,
            exit_status: 0,
        }
    }

    fn topology(&mut self) -> Result<&Topology, TopologyError> {
        if self.topology.is_none() {
            self.topology = Some(Topology::read(self.root)?);
        }
        Ok(self.topology.as_ref().expect("read above"))
    }

    /// Takes the steps in order, printing what they print to `out` (and numactl's
    /// notices and warnings to `err`), then says what is left: `command` is what
    /// followed the options.
    pub fn run(
        mut self,
        steps: &[Step],
        command: Vec<OsString>,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Outcome, NumactlError> {
        for step in steps {
            if let Some(outcome) = self.step(step, out, err)? {
                return Ok(outcome);
            }
        }
        if self.region.is_some() {
            if !command.is_empty() {
                return Err(usage(
                    "no command with shared memory: --shm and --file set up the region and exit",
                ));
            }
            return Ok(Outcome::Exit(self.exit_status));
        }
        if self.strict {
            writeln!(err, "numactl: warning. Strict flag for process ignored.")?;
        }
        if let Some(option) = self.region_option {
            return Err(usage(format!("shm related option {option} for process")));
        }
        if command.is_empty() {
            return Err(usage("no command to run; --show and --hardware need none"));
        }
        Ok(Outcome::Exec(command))
    }

    fn step(
        &mut self,
        step: &Step,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<Option<Outcome>, NumactlError> {
        match step {
            Step::Show => {
                let state = show::State::current(self.root)?;
                write!(out, "{}", show::report(self.topology()?, &state))?;
                return Ok(Some(Outcome::Exit(0)));
            }
            Step::Hardware { json } => {
                self.no_policy_yet()?;
                let topology = self.topology()?;
                if *json {
                    let text = serde_json::to_string_pretty(&hardware::HardwareJson::new(topology))
                        .map_err(std::io::Error::other)?;
                    writeln!(out, "{text}")?;
                } else {
                    write!(out, "{}", hardware::report(topology))?;
                }
                return Ok(Some(Outcome::Exit(0)));
            }
            Step::Balancing
            | Step::All
            | Step::Interleave(_)
            | Step::WeightedInterleave(_)
            | Step::Membind(_)
            | Step::Preferred(_)
            | Step::PreferredMany(_)
            | Step::LocalAlloc => self.policy_step(step)?,
            Step::CpuNodeBind(_) | Step::PhysCpuBind(_) => self.cpu_step(step)?,
            Step::Length(_)
            | Step::Offset(_)
            | Step::ShmMode(_)
            | Step::ShmId(_)
            | Step::Huge
            | Step::Strict => self.region_setting_step(step)?,
            _ => self.region_step(step, out, err)?,
        }
        Ok(None)
    }

    /// The memory policy options (and `--all`, `--balancing`, which shape them).
    fn policy_step(&mut self, step: &Step) -> Result<(), NumactlError> {
        match step {
            Step::Balancing => {
                self.no_policy_yet()?;
                self.balancing = true;
            }
            Step::All => {
                if self.parsed_a_list {
                    return Err(usage(
                        "--all/-a option must be before all cpu/node specifications",
                    ));
                }
                self.parse_all = true;
            }
            Step::Interleave(spec) => {
                let nodes = self.nodes(spec)?;
                self.claim_policy(Mode::Interleave)?;
                self.apply(Mode::Interleave, nodes)?;
            }
            Step::WeightedInterleave(spec) => {
                let nodes = self.nodes(spec)?;
                self.claim_policy(Mode::WeightedInterleave)?;
                self.apply(Mode::WeightedInterleave, nodes)?;
            }
            Step::Membind(spec) => {
                self.claim_policy(Mode::Bind)?;
                let nodes = self.nodes(spec)?;
                if self.region.is_none() && self.balancing {
                    policy::set_membind_balancing(&nodes)?;
                    self.policy_nodes = nodes;
                } else {
                    self.apply(Mode::Bind, nodes)?;
                }
            }
            Step::Preferred(spec) => {
                let nodes = self.nodes(spec)?;
                if nodes.len() != 1 {
                    return Err(usage(format!(
                        "--preferred takes one node, not '{spec}'; use --preferred-many for several"
                    )));
                }
                self.claim_policy(Mode::Preferred)?;
                self.apply(Mode::Preferred, nodes)?;
            }
            Step::PreferredMany(spec) => {
                let nodes = self.nodes(spec)?;
                self.claim_policy(Mode::PreferredMany)?;
                self.apply(Mode::PreferredMany, nodes)?;
            }
            Step::LocalAlloc => {
                self.claim_policy(Mode::Local)?;
                self.apply(Mode::Local, IdSet::new())?;
            }
            _ => unreachable!("policy_step takes policy options only"),
        }
        Ok(())
    }

    /// The CPU binding options.
    fn cpu_step(&mut self, step: &Step) -> Result<(), NumactlError> {
        match step {
            Step::CpuNodeBind(spec) => {
                self.no_region_option_before("-c/--cpubind/--cpunodebind")?;
                let nodes = self.nodes(spec)?;
                policy::bind_cpus_to_nodes(self.topology()?, &nodes)?;
                self.cpus_bound = true;
            }
            Step::PhysCpuBind(spec) => {
                self.no_region_option_before("-C/--physcpubind")?;
                let cpus = self.cpus(spec)?;
                policy::set_cpu_affinity(&cpus)?;
                self.cpus_bound = true;
            }
            _ => unreachable!("cpu_step takes binding options only"),
        }
        Ok(())
    }

    /// The settings of the shared memory region to come (and `--strict`).
    fn region_setting_step(&mut self, step: &Step) -> Result<(), NumactlError> {
        match step {
            Step::Length(size) => {
                self.before_region("--length")?;
                self.settings.length = shm::parse_size(size, "--length").map_err(usage)?;
            }
            Step::Offset(size) => {
                self.before_region("--offset")?;
                self.settings.offset = shm::parse_size(size, "--offset").map_err(usage)?;
            }
            Step::ShmMode(mode) => {
                self.before_region("--shmmode")?;
                self.settings.mode = u32::from_str_radix(mode, 8)
                    .ok()
                    .filter(|m| *m <= 0o7777)
                    .ok_or_else(|| {
                        usage(format!(
                            "--shmmode takes octal permissions such as 0644, not '{mode}'"
                        ))
                    })?;
            }
            Step::ShmId(id) => {
                self.settings.id = shm::parse_c_number(id)
                    .and_then(|id| i64::try_from(id).ok())
                    .ok_or_else(|| {
                        usage(format!(
                            "--shmid takes a number (decimal, 0x hex or 0 octal), not '{id}'"
                        ))
                    })?;
            }
            Step::Huge => {
                self.before_region("--huge")?;
                self.settings.huge = true;
            }
            Step::Strict => self.strict = true,
            _ => unreachable!("region_setting_step takes shared memory settings only"),
        }
        Ok(())
    }

    /// The shared memory region (`--shm`, `--file`) and what is done to it.
    fn region_step(
        &mut self,
        step: &Step,
        out: &mut dyn Write,
        err: &mut dyn Write,
    ) -> Result<(), NumactlError> {
        match step {
            Step::Shm(key_file) => {
                self.region_may_start()?;
                let mut notices = Vec::new();
                let region = Region::attach_sysv(key_file, &self.settings, "--shm", &mut |n| {
                    notices.push(n)
                });
                for notice in notices {
                    writeln!(err, "numactl: {notice}")?;
                }
                self.region = Some(region?);
            }
            Step::File(file) => {
                self.region_may_start()?;
                self.region = Some(Region::attach_file(file, &self.settings, "--file")?);
            }
            Step::Touch => {
                let region = self.region_for("--touch")?;
                region.check_beyond("--touch")?;
                region.touch();
            }
            Step::Dump | Step::DumpNodes => {
                let option = if *step == Step::Dump {
                    "--dump"
                } else {
                    "--dump-nodes"
                };
                let Some(region) = &self.region else {
                    return Err(usage(format!("Cannot do {option} without shared memory.")));
                };
                let text = if *step == Step::Dump {
                    region.dump()?
                } else {
                    region.dump_nodes()?
                };
                write!(out, "{text}")?;
            }
            Step::Verify => {
                let region = self.region_for("--verify")?;
                let Some(mode) = self.policy else {
                    return Err(usage("Need a policy first to verify"));
                };
                region.check_beyond("--verify")?;
                region.touch();
                let expected = MemPolicy {
                    mode,
                    nodes: self.policy_nodes.clone(),
                };
                let problems = region.verify(&expected)?;
                for line in &problems {
                    writeln!(out, "{line}")?;
                }
                if !problems.is_empty() {
                    self.exit_status = 1;
                }
            }
            _ => unreachable!("region_step takes shared memory options only"),
        }
        Ok(())
    }

    /// numactl's `setpolicy`: one policy per run.
    fn claim_policy(&mut self, mode: Mode) -> Result<(), NumactlError> {
        if self.policy.is_some() {
            return Err(usage(
                "Conflicting policies: give one of --interleave, --weighted-interleave, \
                 --preferred, --preferred-many, --membind, --localalloc",
            ));
        }
        self.policy = Some(mode);
        Ok(())
    }

    /// numactl's `nopolicy`: `--hardware`, `--balancing`, `--shm` and `--file` come
    /// before any policy.
    fn no_policy_yet(&self) -> Result<(), NumactlError> {
        if self.policy.is_some() {
            return Err(usage("specify policy after --shm/--file"));
        }
        Ok(())
    }

    /// numactl's `noshm`: region settings come before the region.
    fn before_region(&mut self, option: &'static str) -> Result<(), NumactlError> {
        if self.region.is_some() {
            return Err(usage(format!(
                "{option} must be before shared memory specification"
            )));
        }
        self.region_option = Some(option);
        Ok(())
    }

    /// numactl's `dontshm`: no CPU binding after region settings.
    fn no_region_option_before(&self, option: &str) -> Result<(), NumactlError> {
        match self.region_option {
            Some(region_option) => Err(usage(format!(
                "{region_option} shm option is not allowed before {option}"
            ))),
            None => Ok(()),
        }
    }

    /// Checks before `--shm`/`--file`: no CPU binding and no policy yet.
    fn region_may_start(&self) -> Result<(), NumactlError> {
        if self.cpus_bound {
            return Err(usage("cannot do --cpubind on shared memory"));
        }
        self.no_policy_yet()
    }

    /// numactl's `needshm`.
    fn region_for(&self, option: &str) -> Result<&Region, NumactlError> {
        self.region.as_ref().ok_or_else(|| {
            usage(format!(
                "{option} must be after shared memory specification"
            ))
        })
    }

    /// Sets a policy on the region, or on this process (and so on the command).
    fn apply(&mut self, mode: Mode, nodes: IdSet) -> Result<(), NumactlError> {
        let policy = MemPolicy { mode, nodes };
        match &self.region {
            Some(region) => region.apply(&policy, self.strict)?,
            None => policy::set_mempolicy(&policy)?,
        }
        self.policy_nodes = policy.nodes;
        Ok(())
    }

    /// A node list in numactl's grammar, `same` for the previous one.
    fn nodes(&mut self, spec: &str) -> Result<IdSet, NumactlError> {
        let spec = if spec == "same" {
            self.last_nodes
                .clone()
                .ok_or_else(|| usage("same needs previous node specification"))?
        } else {
            self.last_nodes = Some(spec.to_string());
            spec.to_string()
        };
        self.parsed_a_list = true;
        let (usable, present) = self.usable()?;
        IdSet::parse_spec(&spec, "node", &usable.nodes, &present.nodes)
            .map_err(|e| usage(e.to_string()))
    }

    fn cpus(&mut self, spec: &str) -> Result<IdSet, NumactlError> {
        self.parsed_a_list = true;
        let (usable, present) = self.usable()?;
        IdSet::parse_spec(spec, "cpu", &usable.cpus, &present.cpus)
            .map_err(|e| usage(e.to_string()))
    }

    /// What lists may name (the cpuset's nodes and CPUs, or every present one with
    /// `--all`), and what is present.
    fn usable(&mut self) -> Result<(Allowed, Allowed), NumactlError> {
        let topology = self.topology()?;
        let present = Allowed {
            nodes: topology.node_ids(),
            cpus: topology.nodes.iter().flat_map(|n| n.cpus.iter()).collect(),
        };
        let usable = if self.parse_all {
            present.clone()
        } else {
            Allowed::read(self.root)?
        };
        Ok((usable, present))
    }
}
