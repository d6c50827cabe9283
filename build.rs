//! Link options of the optimised binary (`release`, and `dist`, which inherits it).
//!
//! On Linux with glibc the binary's relative relocations are packed (`-z
//! pack-relative-relocs`: a `DT_RELR` table of bitmaps instead of 24 bytes a pointer). The
//! binary stays position-independent, so it is still loaded at a random address, but the
//! dynamic loader no longer reads a megabyte of relocation entries at each start, and those
//! pages no longer stay resident: a daemon with 10 tasks keeps 0.8 MiB fewer
//! (docs/BENCHMARKS.md, "resident pages"). It needs GNU ld 2.38 or lld 15 to link and glibc
//! 2.36 to run (the loader refuses older ones by symbol version, `GLIBC_ABI_DT_RELR`). Debug
//! and test builds link as before.

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    let var = |name: &str| std::env::var(name).unwrap_or_default();
    let optimised = var("PROFILE") == "release";
    let glibc = var("CARGO_CFG_TARGET_OS") == "linux" && var("CARGO_CFG_TARGET_ENV") == "gnu";
    if optimised && glibc {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}
