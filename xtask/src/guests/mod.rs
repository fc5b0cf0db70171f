//! What every qemu guest of xtask shares (numa-vm, clock-vm, arm64-vm, tls-vm, faults-vm,
//! systemd-vm, c100k-vm): Debian's
//! kernel for an architecture, statically linked guest programs, an initramfs with
//! busybox-static whose init runs a fixed list of commands between markers on the
//! serial console and powers off, booting under TCG, and the console cut back into
//! the commands' outputs. The checks are made here, on the captured console, and
//! printed as one table per task.
//!
//! Downloads are cached under guest/ (kernels, busybox) in cargo's target directory and
//! the static binaries are built under its directory for their target triple, so a
//! second run only boots.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context as _, Result};

pub(crate) mod arm64_vm;
pub(crate) mod c100k_vm;
pub(crate) mod clock_vm;
mod cpio;
pub(crate) mod faults_vm;
mod numa_serving;
pub(crate) mod numa_vm;
pub(crate) mod systemd_vm;
pub(crate) mod tls_vm;

use self::cpio::Archive;
use crate::util::{cargo, ensure_packages, step};

/// A guest architecture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arch {
    X86_64,
    Aarch64,
}

impl Arch {
    /// Debian's name for it.
    pub(crate) fn debian(self) -> &'static str {
        match self {
            Arch::X86_64 => "amd64",
            Arch::Aarch64 => "arm64",
        }
    }

    /// rustup's target triple.
    pub(crate) fn rust_target(self) -> &'static str {
        match self {
            Arch::X86_64 => "x86_64-unknown-linux-gnu",
            Arch::Aarch64 => crate::release::aarch64::TARGET,
        }
    }

    /// The qemu system emulator and the Debian package that has it.
    pub(crate) fn qemu(self) -> (&'static str, &'static str) {
        match self {
            Arch::X86_64 => ("qemu-system-x86", "qemu-system-x86_64"),
            Arch::Aarch64 => ("qemu-system-arm", "qemu-system-aarch64"),
        }
    }

    /// The serial console's device name in the guest.
    fn console(self) -> &'static str {
        match self {
            Arch::X86_64 => "ttyS0",
            Arch::Aarch64 => "ttyAMA0",
        }
    }

    /// Installs what booting this architecture needs and, for a foreign one, the
    /// cross toolchain that builds its programs.
    pub(crate) fn ensure_tools(self) -> Result<()> {
        let (package, program) = self.qemu();
        ensure_packages(&[(package, program), ("busybox-static", "busybox")])?;
        if self == Arch::Aarch64 {
            crate::release::aarch64::ensure_toolchain()?;
        }
        Ok(())
    }
}

/// Where the guests keep their downloads, builds and consoles: guest/ in cargo's
/// target directory.
pub(crate) fn work_dir() -> Result<PathBuf> {
    let work = crate::util::target_dir()?.join("guest");
    fs::create_dir_all(&work).with_context(|| format!("cannot create {}", work.display()))?;
    Ok(work)
}

/// The kernel image of Debian's `linux-image-<arch>` metapackage (the distribution's
/// stock kernel, 6.1 on Debian 12), downloaded once.
pub(crate) fn debian_kernel(arch: Arch) -> Result<PathBuf> {
    let work = work_dir()?;
    let vmlinuz = work.join(format!("vmlinuz-{}", arch.debian()));
    if vmlinuz.is_file() {
        return Ok(vmlinuz);
    }
    let package = kernel_package(arch)?;
    let deb = download_deb(&work, &package, arch)?;
    let version = package.trim_start_matches("linux-image-");
    let image = extract_member(&deb, &format!("./boot/vmlinuz-{version}"))?;
    fs::write(&vmlinuz, image)?;
    fs::remove_file(&deb)?;
    Ok(vmlinuz)
}

/// The versioned image package (`linux-image-6.1.0-NN-amd64`) that the metapackage
/// `linux-image-<arch>` depends on: the kernel and its modules.
fn kernel_package(arch: Arch) -> Result<String> {
    let meta = format!("linux-image-{}:{}", arch.debian(), arch.debian());
    let depends = output(Command::new("apt-cache").args(["depends", &meta]))?;
    Ok(depends
        .lines()
        .find_map(|line| line.trim().strip_prefix("Depends: "))
        .filter(|p| p.starts_with("linux-image-"))
        .with_context(|| format!("apt-cache depends {meta} names no linux-image-* package"))?
        .split(':')
        .next()
        .unwrap_or_default()
        .to_string())
}

/// The modules `names` of the kernel of [`debian_kernel`] (unpacked once), with the
/// modules each needs (its `depends=` modinfo: the package has no modules.dep, which
/// depmod makes at install), in an order `insmod` can load them: each after those it
/// needs. A name the kernel has built in (modules.builtin) is left out.
pub(crate) fn debian_modules(arch: Arch, names: &[&str]) -> Result<Vec<(String, Vec<u8>)>> {
    let package = kernel_package(arch)?;
    let version = package.trim_start_matches("linux-image-").to_string();
    let cache = work_dir()?.join(format!("modules-{version}"));
    if !cache.join("modules.builtin").is_file() {
        let work = work_dir()?;
        let deb = download_deb(&work, &package, arch)?;
        let staging = work.join(format!("modules-{version}.partial"));
        let _ = fs::remove_dir_all(&staging);
        fs::create_dir_all(&staging)?;
        let root = format!("./lib/modules/{version}");
        let mut unpack = Command::new("sh");
        unpack.arg("-c").arg(format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -x -C '{}' --wildcards '{root}/modules.builtin' '{root}/kernel/*'",
            deb.display(),
            staging.display()
        ));
        step(&format!("unpack the modules of {package}"), unpack)?;
        fs::remove_file(&deb)?;
        fs::rename(staging.join(&root), &cache)?;
        fs::remove_dir_all(&staging)?;
    }
    let builtin = fs::read_to_string(cache.join("modules.builtin"))?;
    let mut files = BTreeMap::new();
    index_modules(&cache.join("kernel"), &mut files)?;
    let mut order = Vec::new();
    for name in names {
        add_module(name, &files, &builtin, &mut order)
            .with_context(|| format!("{package}: module {name}"))?;
    }
    Ok(order)
}

/// The name a module file has for the kernel: its stem, `-` as `_`.
fn module_name(path: &str) -> String {
    let file = path.rsplit('/').next().unwrap_or(path);
    file.split(".ko").next().unwrap_or(file).replace('-', "_")
}

/// Every `.ko` under `dir`, by module name.
fn index_modules(dir: &Path, files: &mut BTreeMap<String, PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            index_modules(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "ko") {
            files.insert(module_name(&path.to_string_lossy()), path);
        }
    }
    Ok(())
}

/// Appends module `name` to `order` after the modules it needs, unless it is there or
/// built in.
fn add_module(
    name: &str,
    files: &BTreeMap<String, PathBuf>,
    builtin: &str,
    order: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    let wanted = module_name(name);
    let Some(path) = files.get(&wanted) else {
        ensure!(
            builtin.lines().any(|path| module_name(path) == wanted),
            "neither a module file nor built in"
        );
        return Ok(());
    };
    let file = path
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    if order.iter().any(|(loaded, _)| *loaded == file) {
        return Ok(());
    }
    let bytes = read(path)?;
    for needed in modinfo_depends(&bytes) {
        add_module(&needed, files, builtin, order)?;
    }
    order.push((file, bytes));
    Ok(())
}

/// The modules a module needs: the `depends=` string of its .modinfo section.
fn modinfo_depends(module: &[u8]) -> Vec<String> {
    const KEY: &[u8] = b"\0depends=";
    let Some(at) = module.windows(KEY.len()).position(|w| w == KEY) else {
        return Vec::new();
    };
    let value = &module[at + KEY.len()..];
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    String::from_utf8_lossy(&value[..end])
        .split(',')
        .filter(|name| !name.is_empty())
        .map(str::to_string)
        .collect()
}

/// busybox-static for `arch`: the host's for x86_64, Debian's arm64 package
/// (downloaded once) for aarch64.
pub(crate) fn busybox(arch: Arch) -> Result<Vec<u8>> {
    match arch {
        Arch::X86_64 => {
            let path = crate::util::which("busybox").context("busybox is not on PATH")?;
            let bytes = read(&path)?;
            ensure!(
                !is_dynamic_elf(&bytes),
                "{} is dynamically linked; the guest needs busybox-static (apt-get install \
                 busybox-static)",
                path.display()
            );
            Ok(bytes)
        }
        Arch::Aarch64 => {
            let work = work_dir()?;
            let cached = work.join("busybox-arm64");
            if !cached.is_file() {
                let deb = download_deb(&work, "busybox-static", arch)?;
                fs::write(&cached, extract_member(&deb, "./bin/busybox")?)?;
                fs::remove_file(&deb)?;
            }
            read(&cached)
        }
    }
}

/// `apt-get download PACKAGE:ARCH` into `work`; updates stale package lists once.
fn download_deb(work: &Path, package: &str, arch: Arch) -> Result<PathBuf> {
    let qualified = format!("{package}:{}", arch.debian());
    let download = || {
        let mut command = Command::new("apt-get");
        command
            .current_dir(work)
            .args(["-q", "download", &qualified]);
        step(&format!("apt-get download {qualified}"), command)
    };
    if download().is_err() {
        // Stale package lists name a version the mirror no longer has.
        let mut update = Command::new("apt-get");
        update.args(["-q", "update"]);
        step("apt-get update", update)?;
        download()?;
    }
    let suffix = format!("_{}.deb", arch.debian());
    fs::read_dir(work)?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| {
            path.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&format!("{package}_")) && n.ends_with(&suffix))
        })
        .with_context(|| {
            format!(
                "apt-get download left no {package}_*{suffix} in {}",
                work.display()
            )
        })
}

/// One file of a .deb's data archive.
fn extract_member(deb: &Path, member: &str) -> Result<Vec<u8>> {
    let mut unpack = Command::new("dpkg-deb")
        .arg("--fsys-tarfile")
        .arg(deb)
        .stdout(Stdio::piped())
        .spawn()
        .context("cannot run dpkg-deb")?;
    let tar = Command::new("tar")
        .args(["-x", "-O", "-f", "-", member])
        .stdin(unpack.stdout.take().expect("stdout is piped"))
        .output()
        .context("cannot run tar")?;
    unpack.wait()?;
    ensure!(
        tar.status.success() && !tar.stdout.is_empty(),
        "cannot extract {member} from {}: {}",
        deb.display(),
        String::from_utf8_lossy(&tar.stderr)
    );
    Ok(tar.stdout)
}

/// Builds with `+crt-static` for `arch` (cargo arguments in `args`, e.g. `--package
/// numa --bin numa`) with an explicit `--target`, so that the flags reach only what
/// lands under the target directory's `<triple>/` (the normal build's `debug/` and
/// `release/` stay valid) while the host's proc-macros and build scripts are shared
/// with the normal build, and every guest task shares the artifacts. Returns the
/// profile directory the binaries land in (`release` when `args` has `--release`).
pub(crate) fn static_build(arch: Arch, what: &str, args: &[&str]) -> Result<PathBuf> {
    let mut build = cargo(&["build"]);
    build.args(args);
    static_flags(&mut build, arch);
    step(&format!("build static {what} ({})", arch.debian()), build)?;
    Ok(crate::util::target_dir()?
        .join(arch.rust_target())
        .join(profile(args)))
}

/// `cargo check` with `args` for `arch` with the same flags as [`static_build`], so
/// that the check and the guests' builds share their build scripts' runs (libbpf-sys's
/// and simdutf's C and C++ under the cross compiler) instead of making each twice.
/// The programs in `first_on_path` are found before the system's.
pub(crate) fn static_check(
    arch: Arch,
    what: &str,
    args: &[&str],
    first_on_path: &Path,
) -> Result<()> {
    let mut check = cargo(&["check"]);
    check.args(args);
    static_flags(&mut check, arch);
    let path = std::env::var_os("PATH").unwrap_or_default();
    let paths = std::iter::once(first_on_path.to_path_buf()).chain(std::env::split_paths(&path));
    check.env("PATH", std::env::join_paths(paths)?);
    step(
        &format!("cargo check {what} ({})", arch.rust_target()),
        check,
    )
}

/// Builds for the host (x86_64 guests) in the workspace's own target directory, where
/// `cargo test` has usually built the same already, and returns the profile directory
/// (`release` when `args` has `--release`). The programs are dynamically linked: add
/// them with [`Initramfs::host_program`].
pub(crate) fn host_build(what: &str, args: &[&str]) -> Result<PathBuf> {
    let mut build = cargo(&["build"]);
    build.args(args);
    step(&format!("build {what}"), build)?;
    Ok(crate::util::target_dir()?.join(profile(args)))
}

/// The profile directory cargo builds into for `args`.
fn profile(args: &[&str]) -> &'static str {
    if args.contains(&"--release") {
        "release"
    } else {
        "debug"
    }
}

/// Builds the test executables of `package` with `+crt-static` for `arch` and returns
/// their paths (the library's unit tests and each integration test).
pub(crate) fn static_test_binaries(arch: Arch, package: &str) -> Result<Vec<PathBuf>> {
    let mut build = cargo(&[
        "test",
        "--package",
        package,
        "--no-run",
        "--message-format=json-render-diagnostics",
    ]);
    static_flags(&mut build, arch);
    build.stderr(Stdio::inherit());
    eprintln!(
        "xtask: build static {package} tests ({})",
        arch.rust_target()
    );
    let out = build.output().context("cannot run cargo test --no-run")?;
    ensure!(
        out.status.success(),
        "building {package}'s tests for {} failed",
        arch.rust_target()
    );
    let mut binaries = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if message["reason"] == "compiler-artifact" && message["profile"]["test"] == true {
            if let Some(path) = message["executable"].as_str() {
                binaries.push(PathBuf::from(path));
            }
        }
    }
    ensure!(
        !binaries.is_empty(),
        "cargo built no test executable of {package}"
    );
    Ok(binaries)
}

/// `--target` and `+crt-static`: with an explicit target cargo passes RUSTFLAGS only
/// to that target's units, not to the host's build scripts and proc-macros.
fn static_flags(build: &mut Command, arch: Arch) {
    build
        .args(["--target", arch.rust_target()])
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env(
            "RUSTFLAGS",
            "-C target-feature=+crt-static -C strip=debuginfo",
        );
}

/// The commands init runs, each between `@@@ begin NAME` and `@@@ end NAME rc=N`.
#[derive(Default)]
pub(crate) struct Script {
    body: String,
}

impl Script {
    /// A command whose output and exit status become section `name`.
    pub(crate) fn run(&mut self, name: &str, command: &str) -> &mut Self {
        let _ = writeln!(self.body, "run {name} {command}");
        self
    }

    /// A section for kernel state that settles after boot (the clocksource leaving
    /// `tsc-early`, nodes coming online, a module's files appearing): `command` is run
    /// every 0.1 s until it prints exactly `want` or `seconds` have passed. The section
    /// holds the last output seen, then a `settled after N polls` or `still not settled
    /// after N polls` line, and exits 0 or 1; [`Sections::settled`] reads it.
    pub(crate) fn settle(
        &mut self,
        name: &str,
        command: &str,
        want: &str,
        seconds: u32,
    ) -> &mut Self {
        let _ = writeln!(
            self.body,
            "settle {name} '{want}' {} {command}",
            seconds * 10
        );
        self
    }

    /// A shell line run as is (setup, background jobs), outside any section.
    pub(crate) fn shell(&mut self, line: &str) -> &mut Self {
        let _ = writeln!(self.body, "{line}");
        self
    }

    /// The whole init script: mounts, the /dev/std* links a udev system has (reports
    /// go to `-o /dev/stdout`), loopback up, the commands, power-off.
    pub(crate) fn init(&self) -> String {
        format!(
            "#!/bin/busybox sh\n\
             /bin/busybox --install -s /bin\n\
             export PATH=/bin:/usr/bin\n\
             mount -t proc proc /proc\n\
             mount -t sysfs sysfs /sys\n\
             mount -t devtmpfs devtmpfs /dev\n\
             ln -s /proc/self/fd /dev/fd; ln -s fd/0 /dev/stdin; ln -s fd/1 /dev/stdout; ln -s fd/2 /dev/stderr\n\
             mount -t tmpfs tmpfs /tmp\n\
             ip link set lo up\n\
             run() {{ name=$1; shift; echo \"@@@ begin $name\"; \"$@\" 2>&1; echo \"@@@ end $name rc=$?\"; }}\n\
             settle() {{ name=$1; want=$2; polls=$3; shift 3; n=0; \
             while out=$(\"$@\" 2>&1); [ \"$out\" != \"$want\" ] && [ $n -lt $polls ]; do sleep 0.1; n=$((n+1)); done; \
             echo \"@@@ begin $name\"; echo \"$out\"; \
             if [ \"$out\" = \"$want\" ]; then echo \"settled after $n polls\"; rc=0; else echo \"still not settled after $n polls\"; rc=1; fi; \
             echo \"@@@ end $name rc=$rc\"; }}\n\
             {}echo '@@@ done'\n\
             poweroff -f\n",
            self.body
        )
    }
}

/// An initramfs being built: busybox, the usual directories and device nodes, the
/// programs under /bin.
pub(crate) struct Initramfs {
    archive: Archive,
}

impl Initramfs {
    pub(crate) fn new(arch: Arch) -> Result<Initramfs> {
        let mut archive = Archive::default();
        for dir in ["bin", "dev", "proc", "sys", "usr", "usr/bin", "tmp", "srv"] {
            archive.directory(dir);
        }
        archive.char_device("dev/console", 5, 1);
        archive.char_device("dev/null", 1, 3);
        archive.file("bin/busybox", 0o755, &busybox(arch)?);
        Ok(Initramfs { archive })
    }

    /// The program at `path` as /bin/`name`.
    pub(crate) fn program(&mut self, name: &str, path: &Path) -> Result<&mut Self> {
        self.archive
            .file(&format!("bin/{name}"), 0o755, &read(path)?);
        Ok(self)
    }

    /// A data file at `path` (relative to /), in directories that exist.
    pub(crate) fn data(&mut self, path: &str, bytes: &[u8]) -> &mut Self {
        self.archive.file(path, 0o644, bytes);
        self
    }

    /// A directory at `path` (relative to /), in one that exists.
    pub(crate) fn directory(&mut self, path: &str) -> &mut Self {
        self.archive.directory(path);
        self
    }

    /// A dynamically linked host program as /bin/`name`, with its shared libraries.
    pub(crate) fn host_program(&mut self, name: &str, path: &Path) -> Result<&mut Self> {
        self.program_with_libraries(path, &format!("bin/{name}"))
    }

    /// A dynamically linked host program at `guest_path`, with the shared libraries
    /// ldd says it loads at the same paths as on the host (x86_64 guests only).
    pub(crate) fn program_with_libraries(
        &mut self,
        program: &Path,
        guest_path: &str,
    ) -> Result<&mut Self> {
        self.archive.file(guest_path, 0o755, &read(program)?);
        let ldd = output(Command::new("ldd").arg(program))?;
        let mut dirs: Vec<String> = Vec::new();
        for library in ldd
            .split_whitespace()
            .filter(|word| word.starts_with('/'))
            .map(Path::new)
        {
            let relative = library.strip_prefix("/")?;
            let mut dir = PathBuf::new();
            for component in relative.parent().into_iter().flat_map(Path::components) {
                dir.push(component);
                let name = dir.to_string_lossy().into_owned();
                if !dirs.contains(&name) && !["usr", "usr/bin"].contains(&name.as_str()) {
                    self.archive.directory(&name);
                    dirs.push(name);
                }
            }
            self.archive
                .file(&relative.to_string_lossy(), 0o755, &read(library)?);
        }
        Ok(self)
    }

    /// The archive with `script` as /init.
    pub(crate) fn finish(mut self, script: &Script) -> Vec<u8> {
        self.archive.file("init", 0o755, script.init().as_bytes());
        self.archive.finish()
    }
}

/// A guest to boot: its shape, kernel command line and name (for logs).
pub(crate) struct Machine {
    pub(crate) arch: Arch,
    /// Short, file-name safe: "2node", "hpet", "arm64".
    pub(crate) name: String,
    /// CPUs and MiB per NUMA node (one entry: no NUMA topology).
    pub(crate) nodes: Vec<(u32, u32)>,
    /// Kernel command line after `console=... panic=-1 quiet`.
    pub(crate) append: String,
    /// How long it may take from start to power-off.
    pub(crate) timeout: Duration,
    /// One host thread for all vCPUs (`-accel tcg,thread=single`). Under multi-threaded
    /// TCG, two vCPUs reading the emulated acpi_pm port in a loop starved the guest's
    /// timer (soft lockups, no power-off) in 1 of 2 clock-vm runs; single-threaded, 6
    /// of 6 passed.
    pub(crate) single_threaded: bool,
}

impl Machine {
    fn cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.0).sum()
    }

    fn qemu_command(&self, kernel: &Path, initrd: &Path, console: &Path) -> Command {
        let (_, program) = self.arch.qemu();
        let mut qemu = Command::new(program);
        let memory: u32 = self.nodes.iter().map(|n| n.1).sum();
        qemu.arg("-accel")
            .arg(if self.single_threaded {
                "tcg,thread=single"
            } else {
                "tcg"
            })
            .arg("-m")
            .arg(format!("{memory}M"));
        match self.arch {
            Arch::X86_64 => {
                let sockets = self.nodes.len() as u32;
                qemu.args(["-machine", "q35", "-cpu", "max", "-smp"])
                    .arg(format!(
                        "{},sockets={sockets},cores={}",
                        self.cpus(),
                        self.cpus() / sockets
                    ));
            }
            Arch::Aarch64 => {
                qemu.args(["-machine", "virt", "-cpu", "max", "-smp"])
                    .arg(self.cpus().to_string());
            }
        }
        if self.nodes.len() > 1 {
            let mut first = 0;
            for (node, &(cpus, mib)) in self.nodes.iter().enumerate() {
                qemu.arg("-object")
                    .arg(format!("memory-backend-ram,id=m{node},size={mib}M"))
                    .arg("-numa")
                    .arg(format!(
                        "node,nodeid={node},cpus={first}-{},memdev=m{node}",
                        first + cpus - 1
                    ));
                first += cpus;
            }
            for src in 0..self.nodes.len() {
                for dst in src + 1..self.nodes.len() {
                    qemu.arg("-numa")
                        .arg(format!("dist,src={src},dst={dst},val=20"));
                }
            }
        }
        qemu.arg("-kernel")
            .arg(kernel)
            .arg("-initrd")
            .arg(initrd)
            .arg("-append")
            .arg(format!(
                "console={} panic=-1 quiet {}",
                self.arch.console(),
                self.append
            ))
            .args([
                "-display",
                "none",
                "-monitor",
                "none",
                "-no-reboot",
                "-serial",
            ])
            .arg(format!("file:{}", console.display()))
            .stdin(Stdio::null());
        qemu
    }

    /// Boots with `initramfs` and returns the console cut into sections; the console
    /// stays in target/guest/console-NAME.log.
    pub(crate) fn boot(&self, task: &str, kernel: &Path, initramfs: &[u8]) -> Result<Sections> {
        let work = work_dir()?;
        let initrd = work.join(format!("initrd-{}.cpio", self.name));
        fs::write(&initrd, initramfs)
            .with_context(|| format!("cannot write {}", initrd.display()))?;
        let console = work.join(format!("console-{}.log", self.name));
        let _ = fs::remove_file(&console);
        eprintln!("xtask {task}: booting the {} guest", self.name);
        let started = Instant::now();
        let mut child = self
            .qemu_command(kernel, &initrd, &console)
            .spawn()
            .with_context(|| format!("cannot start {}", self.arch.qemu().1))?;
        let status = loop {
            if let Some(status) = child.try_wait()? {
                break status;
            }
            if started.elapsed() > self.timeout {
                let _ = child.kill();
                let _ = child.wait();
                let text = fs::read_to_string(&console).unwrap_or_default();
                bail!(
                    "the {} guest did not power off within {:?}; console:\n{}",
                    self.name,
                    self.timeout,
                    tail(&text)
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let bytes = read(&console)?;
        let text = String::from_utf8_lossy(&bytes).replace('\r', "");
        ensure!(
            status.success(),
            "qemu exited with {status}; console:\n{}",
            tail(&text)
        );
        eprintln!(
            "xtask {task}: the {} guest ran in {:.1?} (console: {})",
            self.name,
            started.elapsed(),
            console.display()
        );
        Sections::parse(&text)
            .with_context(|| format!("{} guest: console:\n{}", self.name, tail(&text)))
    }
}

/// Boots the guests of `guests` (a machine and its initramfs) as many at a time as the
/// host has cores, each as [`Machine::boot`] does, and returns their consoles in the
/// same order. For guests that run on one host thread (single-threaded TCG): together
/// they use every core without contending for one, so what they time stays what one
/// core gives. Their names must differ (their files in the work directory are named
/// after them).
pub(crate) fn boot_together(
    task: &str,
    kernel: &Path,
    guests: &[(Machine, Vec<u8>)],
) -> Vec<Result<Sections>> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let mut consoles = Vec::with_capacity(guests.len());
    for batch in guests.chunks(cores) {
        std::thread::scope(|scope| {
            let running: Vec<_> = batch
                .iter()
                .map(|(machine, initramfs)| {
                    scope.spawn(move || machine.boot(task, kernel, initramfs))
                })
                .collect();
            consoles.extend(running.into_iter().map(|boot| {
                boot.join()
                    .unwrap_or_else(|_| Err(anyhow::anyhow!("a {task} guest's thread panicked")))
            }));
        });
    }
    consoles
}

/// The console cut at the markers: section name -> (output lines, exit status).
pub(crate) struct Sections(BTreeMap<String, (Vec<String>, i32)>);

impl Sections {
    pub(crate) fn parse(console: &str) -> Result<Sections> {
        let mut sections = BTreeMap::new();
        let mut current: Option<(String, Vec<String>)> = None;
        let mut done = false;
        for line in console.lines() {
            if let Some(name) = line.strip_prefix("@@@ begin ") {
                current = Some((name.to_string(), Vec::new()));
            } else if let Some(rest) = line.strip_prefix("@@@ end ") {
                let (name, rc) = rest.split_once(" rc=").context("end marker without rc")?;
                let (begun, lines) = current.take().context("end marker without begin")?;
                ensure!(begun == name, "section {begun} ended as {name}");
                sections.insert(begun, (lines, rc.trim().parse()?));
            } else if line == "@@@ done" {
                done = true;
            } else if let Some((_, lines)) = current.as_mut() {
                if !is_kernel_message(line) {
                    lines.push(line.to_string());
                }
            }
        }
        ensure!(done, "the guest's init did not finish its commands");
        Ok(Sections(sections))
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// A command's output lines and exit status, whatever it was.
    pub(crate) fn result(&self, name: &str) -> Option<&(Vec<String>, i32)> {
        self.0.get(name)
    }

    /// The output of a command that must have succeeded.
    pub(crate) fn ok(&self, name: &str) -> Result<&Vec<String>, String> {
        match self.0.get(name) {
            Some((lines, 0)) => Ok(lines),
            Some((lines, rc)) => Err(format!("{name} exited {rc}: {}", last_lines(lines))),
            None => Err(format!("no output for {name}")),
        }
    }

    /// The JSON a command that must have succeeded printed, after any notes it wrote
    /// to stderr first (probe's "Tracing ..." line).
    pub(crate) fn json(&self, name: &str) -> Result<serde_json::Value, String> {
        let lines = self.ok(name)?;
        let start = lines.iter().position(|l| l.starts_with('{')).unwrap_or(0);
        serde_json::from_str(&lines[start..].join("\n"))
            .map_err(|e| format!("{name}: not JSON: {e}"))
    }

    /// The value a [`Script::settle`] section settled on; when it did not settle in
    /// time, the error says the last value seen, how long it was polled and what was
    /// wanted.
    pub(crate) fn settled(&self, name: &str, want: &str) -> Result<String, String> {
        let (lines, rc) = self.0.get(name).ok_or(format!("no output for {name}"))?;
        let (verdict, value) = lines.split_last().ok_or(format!("{name}: empty section"))?;
        let value = value.join("\n");
        match rc {
            0 => Ok(value),
            _ => Err(format!(
                "{name}: {verdict} of 0.1 s: the last value seen was {value:?}, want {want:?}"
            )),
        }
    }

    /// The output of a command that must have exited 1.
    pub(crate) fn failure(&self, name: &str) -> Result<String, String> {
        match self.0.get(name) {
            Some((lines, 1)) => Ok(lines.join("\n")),
            Some((lines, rc)) => Err(format!("{name} exited {rc}, want 1: {}", last_lines(lines))),
            None => Err(format!("no output for {name}")),
        }
    }
}

/// The last lines of a failed command's output, on one line (a test binary's summary
/// and failures come last; the whole output stays in the console log).
fn last_lines(lines: &[String]) -> String {
    let shown: Vec<&str> = lines
        .iter()
        .map(String::as_str)
        .filter(|l| !l.trim().is_empty())
        .collect();
    shown[shown.len().saturating_sub(8)..].join(" | ")
}

/// Whether a console line is a kernel message (`[    3.141592] ...`), which can
/// interleave with a command's output.
fn is_kernel_message(line: &str) -> bool {
    line.strip_prefix('[')
        .and_then(|rest| rest.split_once(']'))
        .is_some_and(|(stamp, _)| {
            !stamp.trim().is_empty() && stamp.trim().chars().all(|c| c.is_ascii_digit() || c == '.')
        })
}

/// The outcome of one check: `Err` says why it failed.
pub(crate) type Outcome = Result<(), String>;

/// `Ok` when `condition` holds, else `why`.
pub(crate) fn expect(condition: bool, why: String) -> Outcome {
    if condition {
        Ok(())
    } else {
        Err(why)
    }
}

/// `sha256sum`'s two lines (the served file, the downloaded copy) give the same sum.
pub(crate) fn same_sums(lines: &[String]) -> Outcome {
    let sums: Vec<&str> = lines
        .iter()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    expect(
        sums.len() == 2 && sums[0] == sums[1],
        format!("sha256sum of served and downloaded: {}", lines.join(" | ")),
    )
}

/// The checks of a task's guests, printed as one table.
pub(crate) struct Checks {
    task: &'static str,
    rows: Vec<(String, String, Outcome)>,
    measurements: Vec<String>,
}

impl Checks {
    pub(crate) fn new(task: &'static str) -> Checks {
        Checks {
            task,
            rows: Vec::new(),
            measurements: Vec::new(),
        }
    }

    /// Records the checks of guest `guest`, logging each as it comes.
    pub(crate) fn add(&mut self, guest: &str, results: Vec<(String, Outcome)>) {
        for (check, outcome) in results {
            match &outcome {
                Ok(()) => eprintln!("xtask {}: {guest}: {check}: ok", self.task),
                Err(why) => eprintln!("xtask {}: {guest}: {check}: FAILED: {why}", self.task),
            }
            self.rows.push((guest.to_string(), check, outcome));
        }
    }

    /// Records a measurement made in guest `guest`, printed under the table (numbers
    /// to read, not to pass or fail: the guests run under emulation).
    pub(crate) fn measured(&mut self, guest: &str, what: &str) {
        eprintln!("xtask {}: {guest}: measured: {what}", self.task);
        self.measurements.push(format!("{guest}: {what}"));
    }

    /// Prints the table; fails naming every failed check.
    pub(crate) fn finish(self) -> Result<()> {
        let width = |column: fn(&(String, String, Outcome)) -> usize| {
            self.rows.iter().map(column).max().unwrap_or(0).max(5)
        };
        let guest_width = width(|row| row.0.len());
        let check_width = width(|row| row.1.len());
        let mut table = format!(
            "\n{:<guest_width$}  {:<check_width$}  result\n",
            "guest", "check"
        );
        let mut failures = Vec::new();
        for (guest, check, outcome) in &self.rows {
            let result = match outcome {
                Ok(()) => "ok",
                Err(why) => {
                    failures.push(format!("{guest}: {check}: {why}"));
                    "FAILED"
                }
            };
            let _ = writeln!(
                table,
                "{guest:<guest_width$}  {check:<check_width$}  {result}"
            );
        }
        for line in &self.measurements {
            let _ = writeln!(table, "measured: {line}");
        }
        eprintln!("{table}");
        if !failures.is_empty() {
            bail!(
                "{}: {} of {} checks failed:\n{}",
                self.task,
                failures.len(),
                self.rows.len(),
                failures.join("\n")
            );
        }
        eprintln!("xtask {}: all {} checks passed", self.task, self.rows.len());
        Ok(())
    }
}

/// Whether an ELF file names a program interpreter (PT_INTERP), i.e. is dynamic.
fn is_dynamic_elf(bytes: &[u8]) -> bool {
    let head = &bytes[..bytes.len().min(4096)];
    head.windows(7).any(|w| w == b"/lib64/") || head.windows(5).any(|w| w == b"/lib/")
}

pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).with_context(|| format!("cannot read {}", path.display()))
}

fn output(command: &mut Command) -> Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {:?}", command.get_program()))?;
    ensure!(
        out.status.success(),
        "{:?} failed ({}): {}",
        command.get_program(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The last 40 lines, for error messages.
fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sections_skip_kernel_lines_and_need_the_end_marker() {
        let console = "\x1bc boot noise\n@@@ begin show\npolicy: default\n[    3.1] random: crng init done\n@@@ end show rc=0\n@@@ begin bad\nnuma: no\n@@@ end bad rc=1\n@@@ done\n";
        let s = Sections::parse(console).unwrap();
        assert_eq!(s.ok("show").unwrap(), &["policy: default".to_string()]);
        assert_eq!(s.failure("bad").unwrap(), "numa: no");
        assert!(s.ok("bad").is_err());
        assert!(Sections::parse("@@@ begin show\n").is_err());
        assert!(!is_kernel_message("[1, 2]") && is_kernel_message("[   12.5] x"));
    }

    #[test]
    fn machines_become_qemu_command_lines() {
        let machine = Machine {
            arch: Arch::Aarch64,
            name: "arm64".into(),
            nodes: vec![(1, 512), (1, 512)],
            append: "transparent_hugepage=never".into(),
            timeout: Duration::from_secs(1),
            single_threaded: false,
        };
        let qemu = machine.qemu_command(Path::new("k"), Path::new("i"), Path::new("c"));
        let args: Vec<String> = qemu
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        assert_eq!(qemu.get_program(), "qemu-system-aarch64");
        assert!(
            line.contains("-m 1024M -machine virt -cpu max -smp 2"),
            "{line}"
        );
        assert!(line.contains("node,nodeid=1,cpus=1-1,memdev=m1"), "{line}");
        assert!(line.contains("console=ttyAMA0 panic=-1 quiet transparent_hugepage=never"));
    }

    #[test]
    fn settled_sections_report_the_last_value_seen() {
        let mut script = Script::default();
        script.settle(
            "clocksource",
            "cat /sys/devices/system/clocksource/clocksource0/current_clocksource",
            "tsc",
            60,
        );
        assert!(script.init().contains(
            "settle clocksource 'tsc' 600 cat /sys/devices/system/clocksource/clocksource0/current_clocksource\n"
        ));
        let console = "@@@ begin ok\ntsc\nsettled after 12 polls\n@@@ end ok rc=0\n\
                       @@@ begin late\ntsc-early\nstill not settled after 600 polls\n@@@ end late rc=1\n@@@ done\n";
        let s = Sections::parse(console).unwrap();
        assert_eq!(s.settled("ok", "tsc").unwrap(), "tsc");
        let why = s.settled("late", "tsc").unwrap_err();
        assert!(
            why.contains("still not settled after 600 polls") && why.contains("\"tsc-early\""),
            "{why}"
        );
    }

    /// The init script's `settle` function, run by the host's sh: it polls until the
    /// value comes, and gives up with the last value when it does not.
    #[test]
    fn the_settle_function_polls_until_the_value_comes() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        fs::write(&state, "tsc-early\n").unwrap();
        let functions: String = Script::default()
            .init()
            .lines()
            .filter(|line| line.starts_with("settle()"))
            .collect();
        assert!(
            !functions.is_empty(),
            "no settle function in the init script"
        );
        let script = format!(
            "{functions}\n(sleep 0.3; echo tsc > {0}) &\nsettle switched 'tsc' 100 cat {0}\nsettle never 'hpet' 3 cat {0}\nwait\n",
            state.display()
        );
        let out = Command::new("sh").arg("-c").arg(&script).output().unwrap();
        let s = Sections::parse(&format!(
            "{}@@@ done\n",
            String::from_utf8_lossy(&out.stdout)
        ))
        .unwrap();
        assert_eq!(s.settled("switched", "tsc").unwrap(), "tsc");
        assert!(s
            .settled("never", "hpet")
            .unwrap_err()
            .contains("after 3 polls"));
    }

    #[test]
    fn module_dependencies_come_from_modinfo() {
        let module = b"\x7fELF...\0license=GPL\0depends=libchacha,gf128mul\0vermagic=6.1\0";
        assert_eq!(modinfo_depends(module), ["libchacha", "gf128mul"]);
        assert!(modinfo_depends(b"\0depends=\0name=tls\0").is_empty());
        assert_eq!(
            module_name("kernel/crypto/ghash-generic.ko"),
            "ghash_generic"
        );
    }

    #[test]
    fn scripts_mark_each_command() {
        let mut script = Script::default();
        script.run("show", "numa --show").shell("sleep 1 &");
        let init = script.init();
        assert!(init.contains("run show numa --show\nsleep 1 &\necho '@@@ done'\n"));
        assert!(init.ends_with("poweroff -f\n"));
    }
}
