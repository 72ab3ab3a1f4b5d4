//! `ddtree-bench`: the project's benchmark binary.
//!
//! - `stages`: per-stage timings (AR step, tree verify at several budgets, draft, glue) of
//!   random-weight models of real shapes (Qwen3-8B and its DFlash drafter by default), built
//!   directly on the device, with their efficiency against the memory floor.
//! - `eval`: τ and tokens/s of a real target/drafter pair on held-out prompts (the embedded demo
//!   pair by default), in every mode, checking that each mode reproduces autoregressive decoding.
//! - `self-test`: every CubeCL kernel against its plain-burn reference on the chosen device.
//!
//! ```sh
//! cargo run --release -p ddtree-bench -- eval                    # CPU, demo pair
//! CUDARC_CUDA_VERSION=13000 cargo build --release -p ddtree-bench --features cuda
//! target/release/ddtree-bench stages --device cuda               # on the GPU machine
//! target/release/ddtree-bench self-test --device cuda
//! target/release/ddtree-bench eval --device cuda
//! ```

mod eval;
mod selftest;
mod stages;
mod timing;

use clap::{Parser, Subcommand, ValueEnum};

/// Errors of any stage, reported with their message.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(
    version,
    about = "DDTree benchmarks: stage timings at real shapes, pair evaluation, GPU self-tests"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Per-stage timings of random-weight models of real shapes.
    Stages(stages::Args),
    /// τ and tokens/s of a real pair on held-out prompts, every mode.
    Eval(eval::Args),
    /// Every CubeCL kernel against its reference, on the chosen device.
    SelfTest(selftest::Args),
}

/// Where the models run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Device {
    /// burn's ndarray backend, f32.
    Cpu,
    /// burn's CubeCL CUDA backend, bf16 (build with `--features cuda`).
    Cuda,
    /// burn's CubeCL backend on wgpu (Vulkan), f32, with our kernels (build with `--features
    /// wgpu`): launch counts of the GPU path on a machine without one (Mesa's lavapipe).
    Wgpu,
}

/// Kernel choices the GPU commands share, for comparing kernels with one binary (CUDA only;
/// elsewhere there is nothing to switch).
#[derive(clap::Args, Clone, Copy)]
pub struct KernelSwitches {
    /// The tensor-core linears on warpgroup MMAs where the device has them (sm_90; `false`: warp
    /// MMAs only), on CUDA.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub warpgroup_mma: bool,
    /// The tensor-core attention's softmax by the GPU's `ex2` approximation (`false`: the
    /// accurate `expf`), on CUDA.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub fast_exp: bool,
    /// Blocks of rows (tree verify, drafter blocks) on the CUDA C++ attention where it applies
    /// (`false`: the cubecl tensor-core attention), on CUDA.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub attention_rows: bool,
}

impl KernelSwitches {
    /// Sets the switches for the whole process.
    pub fn apply(self) {
        let Self {
            warpgroup_mma,
            fast_exp,
            attention_rows,
        } = self;
        #[cfg(feature = "cuda")]
        {
            ddtree_kernels::cube::set_warpgroup_mma(warpgroup_mma);
            ddtree_kernels::cube::set_fast_exp(fast_exp);
            ddtree_kernels::cube::set_attention_rows(attention_rows);
        }
        #[cfg(not(feature = "cuda"))]
        let _ = (warpgroup_mma, fast_exp, attention_rows);
    }
}

/// Runs `$stage::run::<Backend>(&device, $args)` for the backend of `$device`.
macro_rules! on_device {
    ($device:expr, $stage:ident, $args:expr) => {
        match $device {
            Device::Cpu => $stage::run::<burn_ndarray::NdArray<f32>>(&Default::default(), $args),
            #[cfg(feature = "cuda")]
            Device::Cuda => $stage::run::<ddtree_kernels::cube::Cuda>(&Default::default(), $args),
            #[cfg(not(feature = "cuda"))]
            Device::Cuda => Err("this binary was built without CUDA: rebuild with `--features cuda`".into()),
            #[cfg(feature = "wgpu")]
            Device::Wgpu => $stage::run::<ddtree_kernels::cube::Wgpu>(&Default::default(), $args),
            #[cfg(not(feature = "wgpu"))]
            Device::Wgpu => Err("this binary was built without wgpu: rebuild with `--features wgpu`".into()),
        }
    };
}

fn main() {
    let cli = Cli::parse();
    let result: Result<(), Error> = match &cli.command {
        Command::Stages(args) => on_device!(args.device, stages, args),
        Command::Eval(args) => on_device!(args.device, eval, args),
        Command::SelfTest(args) => on_device!(args.device, selftest, args),
    };
    if let Err(err) = result {
        eprintln!("error: {err}");
        std::process::exit(1);
    }
}

/// A short description of the backend, for reports.
pub fn describe(device: Device) -> String {
    match device {
        Device::Cpu => format!(
            "CPU, burn ndarray f32, {} thread(s)",
            std::thread::available_parallelism().map_or(1, |n| n.get())
        ),
        Device::Cuda => "CUDA, burn CubeCL backend, bf16 weights and activations, our CubeCL kernels".into(),
        Device::Wgpu => "wgpu (Vulkan), burn CubeCL backend, f32, our CubeCL kernels".into(),
    }
}
