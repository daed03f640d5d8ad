// CUDA kernels of the per-token signal ops, free of torch headers (raw pointers + plain launchers) so that
// `nvcc -c` compile-checks them on machines without a CUDA build of torch. Bound in csrc/bindings_cuda.cpp.
//
// token_stats: grid (token blocks of TS_BM rows, vocabulary splits). Each block walks its split in TS_BV-wide
//   tiles: a shared-memory tiled GEMM (fp32 accumulate) produces z[TS_BM][TS_BV]; one warp per row updates
//   the online state (max m, s = sum e^{z-m}, t = sum z e^{z-m}, label logit). Partials [splits, 4, M] are
//   merged on the host side (O(splits x M)).
// attention_with_mass: grid (query blocks of AT_ROWS rows, B x Hq); one warp per query row. Key/value tiles of
//   32 keys are staged in shared memory; each lane scores one key, the warp keeps the running max, the
//   denominator, the output accumulator (d / 32 values per lane) and the group sums (lane g holds group g),
//   all rescaled together. Never writes [Tq, Tk].
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int TS_BM = 16;
constexpr int TS_BV = 64;
constexpr int TS_BK = 32;
constexpr int TS_THREADS = 256;
constexpr int AT_ROWS = 4;
constexpr int AT_MAXD = 256;
constexpr int AT_MAXG = 32;

__device__ __forceinline__ float to_f(float x) { return x; }
__device__ __forceinline__ float to_f(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ float from_f<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half(x); }

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__global__ void token_stats_kernel(const T* __restrict__ hidden, const T* __restrict__ weight,
                                   const T* __restrict__ bias, const int64_t* __restrict__ ids,
                                   float* __restrict__ part, int64_t M, int64_t V, int64_t H, float inv_t,
                                   int64_t split_v) {
  __shared__ float hs[TS_BM][TS_BK + 1];
  __shared__ float ws[TS_BV][TS_BK + 1];
  __shared__ float zs[TS_BM][TS_BV + 1];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * TS_BM;
  const int64_t v_begin = static_cast<int64_t>(blockIdx.y) * split_v;
  const int64_t v_end = v_begin + split_v < V ? v_begin + split_v : V;
  // each warp owns rows warp and warp + 8 (TS_BM = 16, 8 warps)
  float m_r[2] = {-INFINITY, -INFINITY}, s_r[2] = {0.f, 0.f}, t_r[2] = {0.f, 0.f}, zy_r[2] = {0.f, 0.f};
  int64_t lab[2];
  for (int q = 0; q < 2; ++q) {
    const int64_t row = row0 + warp + 8 * q;
    lab[q] = row < M ? ids[row] : -1;
  }
  for (int64_t v0 = v_begin; v0 < v_end; v0 += TS_BV) {
    // z tile: thread computes 4 outputs (rows r_a, r_a + 4 .. ) of column c
    const int c = tid % TS_BV, rbase = tid / TS_BV;  // rbase in [0, 4)
    float accz[4] = {0.f, 0.f, 0.f, 0.f};
    for (int64_t k0 = 0; k0 < H; k0 += TS_BK) {
      for (int i = tid; i < TS_BM * TS_BK; i += TS_THREADS) {
        const int r = i / TS_BK, kk = i % TS_BK;
        const int64_t row = row0 + r, k = k0 + kk;
        hs[r][kk] = (row < M && k < H) ? to_f(hidden[row * H + k]) : 0.f;
      }
      for (int i = tid; i < TS_BV * TS_BK; i += TS_THREADS) {
        const int r = i / TS_BK, kk = i % TS_BK;
        const int64_t col = v0 + r, k = k0 + kk;
        ws[r][kk] = (col < v_end && k < H) ? to_f(weight[col * H + k]) : 0.f;
      }
      __syncthreads();
#pragma unroll 8
      for (int kk = 0; kk < TS_BK; ++kk) {
        const float wv = ws[c][kk];
#pragma unroll
        for (int j = 0; j < 4; ++j) accz[j] += hs[rbase + 4 * j][kk] * wv;
      }
      __syncthreads();
    }
    const int64_t col = v0 + c;
    const float bv = (bias != nullptr && col < v_end) ? to_f(bias[col]) : 0.f;
    for (int j = 0; j < 4; ++j) zs[rbase + 4 * j][c] = col < v_end ? (accz[j] + bv) * inv_t : -INFINITY;
    __syncthreads();
    for (int q = 0; q < 2; ++q) {
      const int r = warp + 8 * q;
      const float z0 = zs[r][lane], z1 = zs[r][lane + 32];
      const float m_new = fmaxf(m_r[q], warp_max(fmaxf(z0, z1)));
      const float alpha = __expf(m_r[q] - m_new);
      const float e0 = __expf(z0 - m_new), e1 = __expf(z1 - m_new);
      const float te = (e0 > 0.f ? e0 * z0 : 0.f) + (e1 > 0.f ? e1 * z1 : 0.f);
      s_r[q] = s_r[q] * alpha + warp_sum(e0 + e1);
      t_r[q] = t_r[q] * alpha + warp_sum(te);
      m_r[q] = m_new;
      const int64_t y = lab[q];
      if (y >= v0 && y < v0 + TS_BV && y < v_end) zy_r[q] = zs[r][y - v0];
    }
    __syncthreads();
  }
  if (lane == 0) {
    float* base = part + static_cast<int64_t>(blockIdx.y) * 4 * M;
    for (int q = 0; q < 2; ++q) {
      const int64_t row = row0 + warp + 8 * q;
      if (row < M) {
        base[row] = m_r[q];
        base[M + row] = s_r[q];
        base[2 * M + row] = t_r[q];
        base[3 * M + row] = zy_r[q];
      }
    }
  }
}

template <typename T>
__global__ void attention_mass_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                                      const int64_t* __restrict__ groups, T* __restrict__ out,
                                      float* __restrict__ mass, int Hq, int Hkv, int64_t Tq, int64_t Tk, int D,
                                      int G, bool causal, float scale) {
  // dynamic shared memory: K tile [32][D + 1], V tile [32][D + 1], scaled queries [AT_ROWS][D]
  extern __shared__ float smem[];
  const int ld = D + 1;
  float* ks = smem;
  float* vs = ks + 32 * ld;
  float* qs = vs + 32 * ld;
  __shared__ int gs_sh[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int bh = blockIdx.y, b = bh / Hq, hq = bh % Hq, hk = hq / (Hq / Hkv);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * AT_ROWS + warp;
  const int64_t off = Tk - Tq;
  const bool row_ok = row < Tq;
  const T* qrow = q + ((static_cast<int64_t>(b) * Hq + hq) * Tq + (row_ok ? row : 0)) * D;
  for (int x = lane; x < D; x += 32) qs[warp * D + x] = row_ok ? to_f(qrow[x]) * scale : 0.f;
  const T* kh = k + (static_cast<int64_t>(b) * Hkv + hk) * Tk * D;
  const T* vh = v + (static_cast<int64_t>(b) * Hkv + hk) * Tk * D;
  const int64_t* g = groups + static_cast<int64_t>(b) * Tk;
  float acc[AT_MAXD / 32];
#pragma unroll
  for (int x = 0; x < AT_MAXD / 32; ++x) acc[x] = 0.f;
  float m_i = -INFINITY, l_i = 0.f, gsum = 0.f;  // lane g holds the running sum of group g
  const int64_t last_row = static_cast<int64_t>(blockIdx.x) * AT_ROWS + AT_ROWS - 1;
  const int64_t kend = causal ? (last_row + off + 1 < Tk ? last_row + off + 1 : Tk) : Tk;
  const int64_t my_last = causal ? row + off : Tk - 1;
  for (int64_t j0 = 0; j0 < kend; j0 += 32) {
    __syncthreads();
    for (int i = threadIdx.x; i < 32 * D; i += blockDim.x) {
      const int c = i / D, x = i % D;
      const int64_t j = j0 + c;
      ks[c * ld + x] = j < Tk ? to_f(kh[j * D + x]) : 0.f;
      vs[c * ld + x] = j < Tk ? to_f(vh[j * D + x]) : 0.f;
    }
    if (threadIdx.x < 32) gs_sh[threadIdx.x] = (j0 + threadIdx.x < Tk) ? static_cast<int>(g[j0 + threadIdx.x]) : -1;
    __syncthreads();
    const int64_t j = j0 + lane;
    const int gj = gs_sh[lane];
    float s = -INFINITY;
    if (row_ok && j < Tk && j <= my_last && gj >= 0) {
      float d = 0.f;
      for (int x = 0; x < D; ++x) d += qs[warp * D + x] * ks[lane * ld + x];
      s = d;
    }
    const float bmax = warp_max(s);
    if (bmax == -INFINITY) continue;  // warp-uniform: no visible key in this tile for this row
    const float m_new = fmaxf(m_i, bmax);
    const float alpha = __expf(m_i - m_new);
    const float p = (s == -INFINITY) ? 0.f : __expf(s - m_new);
    l_i = l_i * alpha + warp_sum(p);
    gsum *= alpha;
    for (int gg = 0; gg < G; ++gg) {
      const float part_g = warp_sum(gj == gg ? p : 0.f);
      if (lane == gg) gsum += part_g;
    }
#pragma unroll
    for (int x = 0; x < AT_MAXD / 32; ++x) acc[x] *= alpha;
    for (int c = 0; c < 32; ++c) {
      const float pc = __shfl_sync(0xffffffffu, p, c);
      if (pc == 0.f) continue;
#pragma unroll
      for (int x = 0; x < AT_MAXD / 32; ++x) {
        const int dx = lane + 32 * x;
        if (dx < D) acc[x] += pc * vs[c * ld + dx];
      }
    }
    m_i = m_new;
  }
  if (!row_ok) return;
  const float inv = l_i > 0.f ? 1.f / l_i : 0.f;
  T* orow = out + ((static_cast<int64_t>(b) * Hq + hq) * Tq + row) * D;
#pragma unroll
  for (int x = 0; x < AT_MAXD / 32; ++x) {
    const int dx = lane + 32 * x;
    if (dx < D) orow[dx] = from_f<T>(acc[x] * inv);
  }
  if (lane < G) mass[((static_cast<int64_t>(b) * Hq + hq) * Tq + row) * G + lane] = gsum * inv;
}

}  // namespace

// dtype codes: 0 = float32, 1 = bfloat16, 2 = float16. Launchers return a cudaError_t as int (0 = success).
extern "C" int ttrl_token_stats_cuda(const void* hidden, const void* weight, const void* bias, const int64_t* ids,
                                     float* part, int64_t M, int64_t V, int64_t H, float inv_t, int64_t split_v,
                                     int dtype, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((M + TS_BM - 1) / TS_BM), static_cast<unsigned>((V + split_v - 1) / split_v));
  switch (dtype) {
    case 0:
      token_stats_kernel<float><<<grid, TS_THREADS, 0, stream>>>(
          static_cast<const float*>(hidden), static_cast<const float*>(weight), static_cast<const float*>(bias),
          ids, part, M, V, H, inv_t, split_v);
      break;
    case 1:
      token_stats_kernel<__nv_bfloat16><<<grid, TS_THREADS, 0, stream>>>(
          static_cast<const __nv_bfloat16*>(hidden), static_cast<const __nv_bfloat16*>(weight),
          static_cast<const __nv_bfloat16*>(bias), ids, part, M, V, H, inv_t, split_v);
      break;
    case 2:
      token_stats_kernel<__half><<<grid, TS_THREADS, 0, stream>>>(
          static_cast<const __half*>(hidden), static_cast<const __half*>(weight), static_cast<const __half*>(bias),
          ids, part, M, V, H, inv_t, split_v);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

extern "C" int ttrl_attention_mass_cuda(const void* q, const void* k, const void* v, const int64_t* groups, void* out,
                                        float* mass, int B, int Hq, int Hkv, int64_t Tq, int64_t Tk, int D, int G,
                                        bool causal, float scale, int dtype, cudaStream_t stream) {
  if (D > AT_MAXD || G > AT_MAXG || Hkv <= 0 || Hq % Hkv != 0) return static_cast<int>(cudaErrorInvalidValue);
  const dim3 grid(static_cast<unsigned>((Tq + AT_ROWS - 1) / AT_ROWS), static_cast<unsigned>(B * Hq));
  const int threads = 32 * AT_ROWS;
  const size_t shm = sizeof(float) * (2 * 32 * static_cast<size_t>(D + 1) + AT_ROWS * static_cast<size_t>(D));
  if (shm > 48 * 1024) {  // opt in to more than 48 KiB of dynamic shared memory (sm_80+: up to 163/227 KiB)
    cudaError_t e = cudaSuccess;
    if (dtype == 0) e = cudaFuncSetAttribute(attention_mass_kernel<float>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
    if (dtype == 1) e = cudaFuncSetAttribute(attention_mass_kernel<__nv_bfloat16>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
    if (dtype == 2) e = cudaFuncSetAttribute(attention_mass_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shm));
    if (e != cudaSuccess) return static_cast<int>(e);
  }
  switch (dtype) {
    case 0:
      attention_mass_kernel<float><<<grid, threads, shm, stream>>>(
          static_cast<const float*>(q), static_cast<const float*>(k), static_cast<const float*>(v), groups,
          static_cast<float*>(out), mass, Hq, Hkv, Tq, Tk, D, G, causal, scale);
      break;
    case 1:
      attention_mass_kernel<__nv_bfloat16><<<grid, threads, shm, stream>>>(
          static_cast<const __nv_bfloat16*>(q), static_cast<const __nv_bfloat16*>(k),
          static_cast<const __nv_bfloat16*>(v), groups, static_cast<__nv_bfloat16*>(out), mass, Hq, Hkv, Tq, Tk, D, G,
          causal, scale);
      break;
    case 2:
      attention_mass_kernel<__half><<<grid, threads, shm, stream>>>(
          static_cast<const __half*>(q), static_cast<const __half*>(k), static_cast<const __half*>(v), groups,
          static_cast<__half*>(out), mass, Hq, Hkv, Tq, Tk, D, G, causal, scale);
      break;
    default:
      return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}
