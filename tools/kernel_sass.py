#!/usr/bin/env python3
"""Compiles the CUDA source of chosen kernels from a cubecl compilation log to SASS, as cubecl does.

    CUBECL_DEBUG_LOG=cubecl.log ddtree-bench stages --device cuda --reps 1   # on the GPU machine
    python3 tools/kernel_sass.py cubecl.log linear_mma,attention_mma out/ [sm_90a]

Every logged kernel whose header mentions one of the names is written to out/<n>.cu (its header
in a comment), compiled by NVRTC with cubecl's options (`--gpu-architecture=sm_90a -lineinfo`) to
PTX, assembled by ptxas (`-v`: registers, stack, spills) and disassembled by cuobjdump into
out/<n>.sass; the main loop's instruction mix is printed. No GPU is needed: the tools come from a
CUDA toolkit or from PyPI (`nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12 nvidia-cuda-runtime-cu12
nvidia-cuda-cccl-cu12 nvidia-cuda-cuobjdump`, or for CUDA 13 the same names without `-cu12` plus
`nvidia-cuda-nvdisasm`); set NVRTC (the library), PTXAS, CUOBJDUMP and CUDA_INCLUDE (':'-separated
header folders) where they are not found on their own.
"""
import collections
import ctypes
import ctypes.util
import glob
import os
import pathlib
import re
import shutil
import subprocess
import sys


def blocks(log):
    for m in re.finditer(r"\[START_KERNEL_COMPILATION\](.*?)\[END_KERNEL_COMPILATION\]", log, re.S):
        text = m.group(1)
        src = re.search(r"source:\n```[a-z]*\n(.*)\n```", text, re.S)
        if src:
            yield text[: src.start()], src.group(1)


def tool(env, found, patterns):
    """$env, else `found`, else the first file matching one of `patterns`."""
    found = os.environ.get(env) or found or next(
        (match for pattern in patterns for match in sorted(glob.glob(pattern))), None)
    if not found:
        sys.exit(f"{env} not found: set it")
    return found


PIP = os.path.join(sys.prefix, "lib/python3*/site-packages/nvidia")


def nvrtc_ptx(lib, source, options):
    prog = ctypes.c_void_p()
    if lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), None, 0, None, None):
        raise RuntimeError("nvrtcCreateProgram failed")
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    try:
        status = lib.nvrtcCompileProgram(prog, len(options), opts)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        if status:
            raise RuntimeError(log.value.decode(errors="replace")[-2000:])
        lib.nvrtcGetPTXSize(prog, ctypes.byref(size))
        ptx = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetPTX(prog, ptx)
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def loop_mix(sass):
    """The instruction mix of the loop (a backward branch) holding the most MMAs, the innermost of
    equals."""
    ins = re.findall(r"^\s+/\*([0-9a-f]{4,})\*/\s+([^;]*);", sass, re.M)
    ins = [(int(a, 16), text.strip()) for a, text in ins]
    index = {address: j for j, (address, _) in enumerate(ins)}
    best = None
    for i, (_, text) in enumerate(ins):
        m = re.search(r"\bBRA\b.*0x([0-9a-f]+)", text)
        if not m:
            continue
        target = int(m.group(1), 16)
        start = index.get(target)
        if start is None or start > i:
            continue
        body = ins[start : i + 1]
        mmas = sum("MMA" in t for _, t in body)
        if mmas and (best is None or mmas > best[0]):
            best = (mmas, body)
    if not best:
        return "no loop with MMAs"
    ops = collections.Counter(re.sub(r"^@!?U?P\w+\s+", "", t).split()[0].split(".")[0] for _, t in best[1])
    return f"loop of {len(best[1])} instructions: " + ", ".join(f"{k} {v}" for k, v in ops.most_common(16))


def main():
    log_path, names, out = sys.argv[1], sys.argv[2].split(","), pathlib.Path(sys.argv[3])
    arch = sys.argv[4] if len(sys.argv) > 4 else "sm_90a"
    lib = ctypes.CDLL(tool("NVRTC", ctypes.util.find_library("nvrtc"),
                           [f"{PIP}/cu*/lib/libnvrtc.so*", "/usr/local/cuda/lib64/libnvrtc.so*"]))
    ptxas = tool("PTXAS", shutil.which("ptxas"), [f"{PIP}/cu*/bin/ptxas", "/usr/local/cuda/bin/ptxas"])
    cuobjdump = tool("CUOBJDUMP", shutil.which("cuobjdump"),
                     [f"{PIP}/cu*/bin/cuobjdump", "/usr/local/cuda/bin/cuobjdump"])
    # PyPI's CUDA 12 packages are `cuda_*/`, CUDA 13's one `cu13/`; CUDA 13 keeps libcu++
    # (cuda/std/...) under include/cccl.
    roots = glob.glob(f"{PIP}/cu*") + ["/usr/local/cuda"]
    includes = os.environ.get("CUDA_INCLUDE", "").split(":") + [
        d for root in roots for d in (f"{root}/include", f"{root}/include/cccl") if os.path.isdir(d)]
    # CUDA 13's cuobjdump runs nvdisasm, which sits beside it.
    cuobjdump_env = dict(os.environ, PATH=f"{os.path.dirname(cuobjdump)}:{os.environ.get('PATH', '')}")
    options = [f"--gpu-architecture={arch}", "-lineinfo"] + [f"--include-path={d}" for d in includes if d]
    out.mkdir(parents=True, exist_ok=True)
    seen = set()
    n = 0
    for header, source in blocks(pathlib.Path(log_path).read_text(errors="replace")):
        if not any(name in header for name in names) or source in seen:
            continue
        seen.add(source)
        stem = out / str(n)
        stem.with_suffix(".cu").write_text("/*" + header.replace("*/", "* /") + "*/\n" + source)
        print(f"== {n}: {' '.join(header.split())[:600]}")
        n += 1
        try:
            ptx = nvrtc_ptx(lib, source, options)
        except RuntimeError as err:
            print(f"   NVRTC: {err}")
            continue
        stem.with_suffix(".ptx").write_text(ptx)
        built = subprocess.run([ptxas, f"-arch={arch}", "-v", "-o", str(stem.with_suffix(".cubin")),
                                str(stem.with_suffix(".ptx"))], capture_output=True, text=True)
        print("   " + " ".join(l.split("info    :")[-1].strip() for l in built.stderr.splitlines()
                               if "registers" in l or "spill" in l))
        if built.returncode == 0:
            sass = subprocess.run([cuobjdump, "-sass", str(stem.with_suffix(".cubin"))],
                                  capture_output=True, text=True, env=cuobjdump_env).stdout
            stem.with_suffix(".sass").write_text(sass)
            print("   " + loop_mix(sass))
    print(f"{n} kernels")


if __name__ == "__main__":
    main()
