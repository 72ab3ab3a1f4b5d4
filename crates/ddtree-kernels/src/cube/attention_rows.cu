// The body of `attention_rows` (attention_rows.rs), written into the cubecl kernel through its
// comment path. The prologue that attention_rows.rs writes before this text declares:
//   TA_HEAD_DIM, TA_GROUP, TA_Q_HEADS, TA_MODE (0 causal, 1 full, 2 tree), TA_BF16 (constexpr);
//   ta_q, ta_k, ta_v (const unsigned char *: queries [rows, q_heads, head_dim], caches
//   [kv_heads, capacity, head_dim] at element strides ta_par[6], ta_par[7]), ta_bits (const
//   unsigned *: [rows, words] ancestor bits), ta_out (unsigned char *: [rows, q_heads, head_dim]),
//   ta_part_o, ta_part_ml (float *: the splits' partials), ta_par (const unsigned *: the run-time
//   scalars, which the kernel's cubecl code stored before a barrier) and ta_smem (the shared
//   address of the shared memory after them).
// The standalone prototype it follows, with an f32 reference and a timing harness:
// tools/tree_attention.cu. Four warps of 16 queries, 64 keys per step, two cp.async stages of K
// and V, 16-byte chunks XOR-swizzled by row so that ldmatrix reads them without bank conflicts.
typedef unsigned long long ta_size; // NVRTC declares no size_t without headers
const float ta_neg_inf = __int_as_float(0xff800000); // nor INFINITY
constexpr int TA_ROW = TA_HEAD_DIM * 2;   // bytes of one query, key or value row
constexpr int TA_CHUNKS = TA_HEAD_DIM / 8; // its 16-byte chunks
constexpr int TA_KS = 64, TA_QB = 64, TA_STAGES = 2, TA_THREADS = 128;
constexpr int TA_NT = TA_KS / 8, TA_KT = TA_HEAD_DIM / 16, TA_DT = TA_HEAD_DIM / 8;
constexpr int TA_TILE = TA_KS * TA_ROW;
constexpr int TA_RSTEP = TA_THREADS / TA_CHUNKS; // rows one pass of the cube copies
static_assert(TA_CHUNKS >= 8 && TA_RSTEP % 8 == 0 && TA_KS % TA_RSTEP == 0, "head_dim 64 or 128");

const int ta_prefix = (int)ta_par[0], ta_rows = (int)ta_par[1], ta_words = (int)ta_par[2];
const int ta_window = (int)ta_par[3];
// Scores in log2 units: exp2 of (score · scale · log2 e − max) in one FMA and one ex2.
const float ta_sl2 = __uint_as_float(ta_par[4]) * 1.4426950408889634f;
const int ta_per_split = (int)ta_par[5];
const ta_size ta_head_bytes = (ta_size)ta_par[6] * 2, ta_row_bytes = (ta_size)ta_par[7] * 2;

const int ta_tid = threadIdx.x, ta_warp = ta_tid / 32, ta_lane = ta_tid % 32;
const int ta_g = ta_lane / 4, ta_t = ta_lane % 4;
const int ta_kvh = blockIdx.x, ta_split = blockIdx.y;
const int ta_nq = TA_GROUP * ta_rows;        // queries j = row · group + head in group
const int ta_q0 = blockIdx.z * TA_QB;        // the cube's first query
const int ta_qw0 = ta_q0 + ta_warp * 16;     // the warp's first query
const bool ta_active = ta_qw0 < ta_nq;       // a warp past the last query only copies
const int ta_k0 = ta_split * ta_per_split;
const int ta_kend = min(ta_k0 + ta_per_split, ta_prefix + ta_rows);
const int ta_steps = (ta_kend - ta_k0 + TA_KS - 1) / TA_KS;
// Keys before `open_end` are seen by every query (without a window): the prefix, in full mode
// the block too. Only the other steps test each score's visibility.
const int ta_open_end = TA_MODE == 1 ? ta_kend : min(ta_prefix, ta_kend);
const unsigned char *ta_kbase = ta_k + ta_kvh * ta_head_bytes;
const unsigned char *ta_vbase = ta_v + ta_kvh * ta_head_bytes;

// 256-byte aligned, so that a chunk's swizzle is an XOR on the address.
const unsigned ta_s_q = (ta_smem + 255u) & ~255u;
const unsigned ta_s_kv = ta_s_q + TA_QB * TA_ROW; // stage s: K at ta_s_kv + 2 s TA_TILE, then V

auto ta_cp_async = [](unsigned dst, const void *src, unsigned src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
};
auto ta_commit = []() { asm volatile("cp.async.commit_group;\n" ::: "memory"); };
auto ta_ldsm = [](unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
};
auto ta_ldsm_t = [](unsigned (&r)[4], unsigned addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr) : "memory");
};
// c (16×8 f32) += a (16×16, row-major) · b (16×8, col-major).
auto ta_mma = [](float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (TA_BF16) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
// Two floats as a pair of 2-byte floats, the lower column in the low half (as the fragments
// want), rounded to nearest; and back.
auto ta_pack = [](float lo, float hi) -> unsigned {
  unsigned r;
  if constexpr (TA_BF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
};
auto ta_unpack = [](unsigned r, float &lo, float &hi) {
  if constexpr (TA_BF16) {
    lo = __uint_as_float(r << 16);
    hi = __uint_as_float(r & 0xffff0000u);
  } else {
    asm("{\n.reg .f16 a, b;\nmov.b32 {a, b}, %2;\ncvt.f32.f16 %0, a;\ncvt.f32.f16 %1, b;\n}\n" : "=f"(lo), "=f"(hi) : "r"(r));
  }
};
// Byte offset of chunk `chunk` of row `row` in a staged tile: without the XOR the 8 rows that one
// ldmatrix matrix reads would share their banks.
auto ta_swz = [](int row, int chunk) -> unsigned {
  return (unsigned)(row * TA_ROW + ((chunk ^ (row & 7)) << 4));
};
// Whether block row `row` (cache row prefix + row) sees cache row `key` (attention.rs's `sees`).
auto ta_sees = [&](int row, int key) -> bool {
  if (ta_window != 0 && key + ta_window <= ta_prefix + row) return false;
  if (key < ta_prefix || TA_MODE == 1) return true;
  const int col = key - ta_prefix;
  if (TA_MODE == 0) return col <= row;
  return (__ldg(ta_bits + (ta_size)row * ta_words + col / 32) >> (col % 32)) & 1u;
};

// The cube's queries (zeros past the last), one commit group.
for (int i = ta_tid; i < TA_QB * TA_CHUNKS; i += TA_THREADS) {
  const int r = i / TA_CHUNKS, c = i % TA_CHUNKS, j = ta_q0 + r;
  const bool ok = j < ta_nq;
  const ta_size at = ((ta_size)(j / TA_GROUP) * TA_Q_HEADS + ta_kvh * TA_GROUP + j % TA_GROUP) * TA_ROW + c * 16;
  ta_cp_async(ta_s_q + ta_swz(r, c), ok ? ta_q + at : ta_q, ok ? 16u : 0u);
}
ta_commit();

// Step `step`'s keys and values into stage `stage`. Unit tid copies chunk tid % CHUNKS of keys
// tid / CHUNKS + i · RSTEP: one swizzle term for every i (RSTEP is a multiple of 8). Keys past
// the split's end (its last step only) repeat its last key: in bounds and finite, then masked.
const int ta_r0 = ta_tid / TA_CHUNKS, ta_c0 = ta_tid % TA_CHUNKS;
const unsigned ta_dst0 = ta_swz(ta_r0, ta_c0);
auto ta_load = [&](int step, int stage) {
  const unsigned sk = ta_s_kv + stage * 2 * TA_TILE + ta_dst0, sv = sk + TA_TILE;
  const int kb = ta_k0 + step * TA_KS;
#pragma unroll
  for (int i = 0; i < TA_KS / TA_RSTEP; ++i) {
    const ta_size off = (ta_size)min(kb + ta_r0 + i * TA_RSTEP, ta_kend - 1) * ta_row_bytes + ta_c0 * 16;
    ta_cp_async(sk + i * TA_RSTEP * TA_ROW, ta_kbase + off, 16u);
    ta_cp_async(sv + i * TA_RSTEP * TA_ROW, ta_vbase + off, 16u);
  }
};
// One commit group per step, empty ones included, so that the wait counts stay uniform.
#pragma unroll
for (int s = 0; s < TA_STAGES - 1; ++s) {
  if (s < ta_steps) ta_load(s, s);
  ta_commit();
}

// ldmatrix addresses. Q (A) and V (B, .trans): matrices {rows 0-7, 8-15} × {chunk +0, +1}, so
// lane l gives row (l & 7) + 8 ((l >> 3) & 1), chunk + (l >> 4). K (B): matrices {keys 0-7:
// chunk +0, +1}, {keys 8-15: chunk +0, +1}, so lane l gives key (l & 7) + 8 (l >> 4), chunk +
// ((l >> 3) & 1). Every row these name is ≡ lane (mod 8), so the swizzled address of chunk
// 2 x + c is (lane offset) ^ (x << 5): one lane offset, then an XOR with an immediate.
const int ta_a_row = (ta_lane & 7) + ((ta_lane >> 3) & 1) * 8, ta_a_chunk = ta_lane >> 4;
const int ta_k_row = (ta_lane & 7) + (ta_lane >> 4) * 8, ta_k_chunk = (ta_lane >> 3) & 1;
const unsigned ta_a_lane = ta_a_row * TA_ROW + ((ta_a_chunk ^ (ta_lane & 7)) << 4);
const unsigned ta_k_lane = ta_k_row * TA_ROW + ((ta_k_chunk ^ (ta_lane & 7)) << 4);

unsigned ta_qf[TA_KT][4];
asm volatile("cp.async.wait_group %0;\n" ::"n"(TA_STAGES - 1) : "memory"); // the queries' group
__syncthreads();
if (ta_active) {
#pragma unroll
  for (int kt = 0; kt < TA_KT; ++kt) ta_ldsm(ta_qf[kt], (ta_s_q + ta_warp * 16 * TA_ROW + ta_a_lane) ^ (kt << 5));
}

float ta_o[TA_DT][4];
float ta_m[2], ta_l[2]; // rows g and g + 8: running maximum (log2 units), this lane's share of the sum
#pragma unroll
for (int dt = 0; dt < TA_DT; ++dt)
#pragma unroll
  for (int e = 0; e < 4; ++e) ta_o[dt][e] = 0.f;
#pragma unroll
for (int h = 0; h < 2; ++h) {
  ta_m[h] = ta_neg_inf;
  ta_l[h] = 0.f;
}

for (int it = 0; it < ta_steps; ++it) {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(TA_STAGES - 2) : "memory"); // this unit's copies of step it
  __syncthreads(); // everyone's, and everyone is done with step it − 1's stage
  if (it + TA_STAGES - 1 < ta_steps) ta_load(it + TA_STAGES - 1, (it + TA_STAGES - 1) % TA_STAGES);
  ta_commit();
  if (!ta_active) continue;

  const unsigned sk = ta_s_kv + (it % TA_STAGES) * 2 * TA_TILE, sv = sk + TA_TILE;
  const int kb = ta_k0 + it * TA_KS;

  // S = Q · Kᵀ.
  float s[TA_NT][4];
#pragma unroll
  for (int nt = 0; nt < TA_NT; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[nt][e] = 0.f;
#pragma unroll
  for (int kt = 0; kt < TA_KT; ++kt) {
#pragma unroll
    for (int np = 0; np < TA_KS / 16; ++np) {
      unsigned b[4];
      ta_ldsm(b, ((sk + ta_k_lane) ^ (kt << 5)) + np * 16 * TA_ROW);
      ta_mma(s[2 * np], ta_qf[kt], b[0], b[1]);
      ta_mma(s[2 * np + 1], ta_qf[kt], b[2], b[3]);
    }
  }

  // The mask, only on steps past the open keys (or with a window). Lane holds rows g (e = 0, 1)
  // and g + 8 (e = 2, 3), keys nt · 8 + 2 t + (e & 1); a query past the last sees nothing.
  if (ta_window != 0 || kb + TA_KS > ta_open_end) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = ta_qw0 + ta_g + 8 * h;
      const int row = j / TA_GROUP;
#pragma unroll
      for (int nt = 0; nt < TA_NT; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = kb + nt * 8 + 2 * ta_t + e;
          if (!(j < ta_nq && key < ta_kend && ta_sees(row, key))) s[nt][2 * h + e] = ta_neg_inf;
        }
    }
  }

  // The online softmax of each row (its four lanes meet by shuffles).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = ta_neg_inf;
#pragma unroll
    for (int nt = 0; nt < TA_NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * h], s[nt][2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(ta_m[h], mx * ta_sl2);
    // A row with nothing visible yet keeps −inf; it subtracts 0 then, not −inf (NaN).
    const float m_use = m_new == ta_neg_inf ? 0.f : m_new;
    const float corr = exp2f(ta_m[h] - m_use);
    ta_m[h] = m_new;
    float sum = 0.f;
#pragma unroll
    for (int nt = 0; nt < TA_NT; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = exp2f(fmaf(s[nt][2 * h + e], ta_sl2, -m_use));
        s[nt][2 * h + e] = p;
        sum += p;
      }
    ta_l[h] = ta_l[h] * corr + sum;
#pragma unroll
    for (int dt = 0; dt < TA_DT; ++dt) {
      ta_o[dt][2 * h] *= corr;
      ta_o[dt][2 * h + 1] *= corr;
    }
  }

  // O += P · V. P's A fragment of keys 16 kk.. is S tiles 2 kk and 2 kk + 1, each weight the sum
  // of a high and a low 2-byte part (two MMAs), so that P · V is as exact as f32 weights.
#pragma unroll
  for (int kk = 0; kk < TA_KS / 16; ++kk) {
    unsigned ph[4], pl[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float a = s[2 * kk + i / 2][2 * (i % 2)], b = s[2 * kk + i / 2][2 * (i % 2) + 1];
      float back_a, back_b;
      ph[i] = ta_pack(a, b);
      ta_unpack(ph[i], back_a, back_b);
      pl[i] = ta_pack(a - back_a, b - back_b);
    }
    // Opaque to the compiler, so that it forms the V addresses for each kk rather than holding
    // them in registers across the loop.
    unsigned v_base = sv + ta_a_lane + kk * 16 * TA_ROW;
    asm volatile("" : "+r"(v_base));
#pragma unroll
    for (int dp = 0; dp < TA_DT / 2; ++dp) {
      unsigned b[4];
      ta_ldsm_t(b, v_base ^ (dp << 5));
      ta_mma(ta_o[2 * dp], ph, b[0], b[1]);
      ta_mma(ta_o[2 * dp + 1], ph, b[2], b[3]);
      ta_mma(ta_o[2 * dp], pl, b[0], b[1]);
      ta_mma(ta_o[2 * dp + 1], pl, b[2], b[3]);
    }
  }
}
asm volatile("cp.async.wait_group 0;\n" ::: "memory");

// The quad's sums (every lane shuffles before any lane skips a query past the last), then the
// output, or the split's partials: the unnormalised output, the maximum (natural-log units, as
// attention_combine reads it; an empty split's −inf as f32's lowest, as attention_mma writes it)
// and the sum.
if (ta_active) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = ta_l[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const int j = ta_qw0 + ta_g + 8 * h;
    if (j < ta_nq) {
      const ta_size query = (ta_size)(j / TA_GROUP) * TA_Q_HEADS + ta_kvh * TA_GROUP + j % TA_GROUP;
      if (gridDim.y == 1) {
        const float inv = l > 0.f ? 1.f / l : 0.f;
        unsigned char *dst = ta_out + query * TA_ROW + 4 * ta_t;
#pragma unroll
        for (int dt = 0; dt < TA_DT; ++dt)
          *reinterpret_cast<unsigned *>(dst + dt * 16) = ta_pack(ta_o[dt][2 * h] * inv, ta_o[dt][2 * h + 1] * inv);
      } else {
        const ta_size at = (ta_size)ta_split * ta_rows * TA_Q_HEADS + query;
        float *dst = ta_part_o + at * TA_HEAD_DIM + 2 * ta_t;
#pragma unroll
        for (int dt = 0; dt < TA_DT; ++dt)
          *reinterpret_cast<float2 *>(dst + dt * 8) = make_float2(ta_o[dt][2 * h], ta_o[dt][2 * h + 1]);
        if (ta_t == 0) {
          const float m = ta_m[h] == ta_neg_inf ? -3.40282347e38f : ta_m[h] * 0.6931471805599453f;
          *reinterpret_cast<float2 *>(ta_part_ml + 2 * at) = make_float2(m, l);
        }
      }
    }
  }
}
