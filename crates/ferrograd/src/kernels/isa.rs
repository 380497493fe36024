//! The instruction set the hand-written kernels run on, chosen once per process.
//!
//! One build runs on any x86-64: the matrix-product micro-kernels exist for AVX-512 and for
//! AVX2 + FMA, and every other hot loop is compiled for both and for the baseline. Every
//! dispatch point asks [`Isa::active`], so the environment variable `FERROGRAD_ISA`
//! (`avx512`, `avx2` or `portable`) forces one path for tests and benchmarks on a CPU that
//! has better. It never selects more than the CPU has: a request above it falls back to the
//! best the CPU supports, with a warning on stderr.

use std::sync::OnceLock;

/// A kernel path, from the baseline up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Baseline x86-64 (SSE2) or any other architecture: f32 products go through
    /// `matrixmultiply`, convolutions through im2col or the direct kernels.
    Portable,
    /// AVX2 and FMA: a 6×16 register tile for f32 products (Haswell and later, AMD Zen).
    Avx2,
    /// AVX-512F (and VL): a 12×32 register tile for f32 products.
    Avx512,
}

impl Isa {
    /// Every path, from the baseline up.
    pub const ALL: [Isa; 3] = [Isa::Portable, Isa::Avx2, Isa::Avx512];

    /// The name `FERROGRAD_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Portable => "portable",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// The path a name (as [`Isa::name`] gives it, any case) stands for.
    pub fn parse(name: &str) -> Option<Isa> {
        Isa::ALL
            .into_iter()
            .find(|isa| isa.name().eq_ignore_ascii_case(name.trim()))
    }

    /// The best path this CPU supports.
    pub fn detected() -> Isa {
        static DETECTED: OnceLock<Isa> = OnceLock::new();
        *DETECTED.get_or_init(detect)
    }

    /// Every path this CPU supports, from the baseline up.
    pub fn supported() -> Vec<Isa> {
        Isa::ALL
            .into_iter()
            .filter(|&isa| isa <= Isa::detected())
            .collect()
    }

    /// The path the kernels take in this process: `FERROGRAD_ISA` when it is set (at most
    /// what the CPU supports), the best the CPU supports otherwise. Read once, at the first
    /// kernel call.
    pub fn active() -> Isa {
        static ACTIVE: OnceLock<Isa> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            if std::env::var_os("FERROGRAD_NO_AVX512").is_some() {
                eprintln!(
                    "ferrograd: FERROGRAD_NO_AVX512 is no longer read; \
                     FERROGRAD_ISA=portable|avx2|avx512 chooses the kernel path"
                );
            }
            let requested = std::env::var("FERROGRAD_ISA").ok();
            let (isa, warning) = choose(requested.as_deref(), Isa::detected());
            if let Some(warning) = warning {
                eprintln!("ferrograd: {warning}");
            }
            isa
        })
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The path for a `FERROGRAD_ISA` value on a CPU whose best is `detected`, and what to warn
/// about when the value cannot be honoured as given.
fn choose(requested: Option<&str>, detected: Isa) -> (Isa, Option<String>) {
    let Some(name) = requested.filter(|n| !n.trim().is_empty()) else {
        return (detected, None);
    };
    match Isa::parse(name) {
        None => (
            detected,
            Some(format!(
                "FERROGRAD_ISA={name:?} is not one of avx512, avx2, portable; using {detected}"
            )),
        ),
        Some(isa) if isa > detected => (
            detected,
            Some(format!(
                "FERROGRAD_ISA={name} asks for more than this CPU has; using {detected}"
            )),
        ),
        Some(isa) => (isa, None),
    }
}

/// The size of the L2 cache in bytes as the CPU reports it (CPUID leaf 0x8000_0006, which
/// Intel and AMD parts both answer), or `None` where it does not say. Read once, on whichever
/// core the first caller runs: on a hybrid Intel part an efficiency core reports its
/// cluster's shared L2, and two hardware threads of one core share theirs, so this is a
/// cache size for sizing blocks, not one thread's exclusive share.
pub fn l2_bytes() -> Option<usize> {
    static L2: OnceLock<Option<usize>> = OnceLock::new();
    *L2.get_or_init(read_l2_bytes)
}

/// Leaf 0x8000_0006's ECX: bits 31..16 are the L2 size in KiB (0 where the leaf is not
/// filled in); the low half holds the line size and associativity.
fn l2_from_ecx(ecx: u32) -> Option<usize> {
    let kib = (ecx >> 16) as usize;
    (kib > 0).then_some(kib * 1024)
}

#[cfg(target_arch = "x86_64")]
fn read_l2_bytes() -> Option<usize> {
    use std::arch::x86_64::__cpuid;
    const L2_LEAF: u32 = 0x8000_0006;
    if __cpuid(0x8000_0000).eax < L2_LEAF {
        return None;
    }
    l2_from_ecx(__cpuid(L2_LEAF).ecx)
}

#[cfg(not(target_arch = "x86_64"))]
fn read_l2_bytes() -> Option<usize> {
    None
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Isa {
    if std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        Isa::Avx512
    } else if std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
    {
        Isa::Avx2
    } else {
        Isa::Portable
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Isa {
    Isa::Portable
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_honoured_up_to_what_the_cpu_has() {
        assert_eq!(choose(None, Isa::Avx2), (Isa::Avx2, None));
        assert_eq!(choose(Some(""), Isa::Avx512), (Isa::Avx512, None));
        assert_eq!(choose(Some("portable"), Isa::Avx2), (Isa::Portable, None));
        assert_eq!(choose(Some(" AVX2 "), Isa::Avx512), (Isa::Avx2, None));
        let (isa, warning) = choose(Some("avx512"), Isa::Avx2);
        assert_eq!(isa, Isa::Avx2);
        assert!(warning.unwrap().contains("more than this CPU has"));
        let (isa, warning) = choose(Some("sse9"), Isa::Portable);
        assert_eq!(isa, Isa::Portable);
        assert!(warning.unwrap().contains("not one of"));
    }

    #[test]
    fn names_round_trip() {
        for isa in Isa::ALL {
            assert_eq!(Isa::parse(isa.name()), Some(isa));
        }
        assert!(Isa::supported().contains(&Isa::Portable));
        assert!(Isa::supported().contains(&Isa::detected()));
    }

    #[test]
    fn the_l2_size_comes_from_the_high_half_of_ecx() {
        // Zen 3: 512 KiB, 64-byte lines, 8 ways; an Intel part with 2 MiB.
        assert_eq!(l2_from_ecx(0x0200_6140), Some(512 << 10));
        assert_eq!(l2_from_ecx(0x0800_7040), Some(2 << 20));
        assert_eq!(l2_from_ecx(0x0000_6140), None);
        // Where Linux says what this CPU has, the size is one of its cores' level-2 caches
        // (on a hybrid part the two kinds of core report different ones).
        let level2: Vec<usize> = std::fs::read_dir("/sys/devices/system/cpu")
            .into_iter()
            .flatten()
            .flatten()
            .flat_map(|cpu| {
                std::fs::read_dir(cpu.path().join("cache"))
                    .into_iter()
                    .flatten()
            })
            .flatten()
            .filter(|index| {
                std::fs::read_to_string(index.path().join("level")).is_ok_and(|l| l.trim() == "2")
            })
            .filter_map(|index| std::fs::read_to_string(index.path().join("size")).ok())
            .filter_map(|size| size.trim().strip_suffix('K')?.parse::<usize>().ok())
            .map(|kib| kib << 10)
            .collect();
        if let (Some(l2), false) = (l2_bytes(), level2.is_empty()) {
            assert!(
                level2.contains(&l2),
                "CPUID's L2 {l2} not among Linux's {level2:?}"
            );
        }
    }
}
