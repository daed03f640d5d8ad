// CPU kernels of the per-token signal ops (one translation unit, OpenMP through at::parallel_for).
//
// token_stats_cpu: for each vocabulary block, one GEMM tile (at::mm_out into a reused buffer) and a fused
//   single-pass epilogue per row: running max m, s = sum exp(z - m), t = sum z exp(z - m) (rescaled when m
//   grows), and the label logit. lse = m + log s, entropy = lse - t / s. Peak extra memory: one tile.
// attention_with_mass_cpu: flash-style streaming attention per (batch, head, query block): running max,
//   running denominator, output accumulator and one running sum per key group are rescaled together.
//   Never builds [Tq, Tk]. Padding keys (group < 0) are skipped; causal mask aligned bottom-right.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Hot loops are compiled for AVX-512, AVX2 and the baseline ISA and picked at load time (GCC/Clang function
// multiversioning), so the wheel stays portable while the loops run at full vector width.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TTRL_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define TTRL_MULTIVERSION
#endif

// exp(x) for x <= 0 by range reduction 2^n * e^r, |r| <= ln2/2, and a degree-6 polynomial; written so that
// the compiler vectorises the loops that call it (no branches, no libm call). Relative error ~2e-7.
static inline __attribute__((always_inline)) float exp_nonpos(float x) {
  x = std::max(x, -87.0f);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round to nearest, vectorisable
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// One row of a logits tile: row max, then s = sum e^{z-m}, t = sum z e^{z-m} with m = max(m_old, row max).
TTRL_MULTIVERSION
float row_max(const float* z, int64_t n) {
  float mx = kNegInf;
#pragma omp simd reduction(max : mx)
  for (int64_t j = 0; j < n; ++j) mx = std::max(mx, z[j]);
  return mx;
}

TTRL_MULTIVERSION
void row_exp_sums(const float* z, int64_t n, float m, float* s_out, float* t_out) {
  float se = 0.0f, te = 0.0f;
#pragma omp simd reduction(+ : se, te)
  for (int64_t j = 0; j < n; ++j) {
    const float e = exp_nonpos(z[j] - m);
    se += e;
    te += e * z[j];
  }
  *s_out = se;
  *t_out = te;
}

TTRL_MULTIVERSION
float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t x = 0; x < n; ++x) acc += a[x] * b[x];
  return acc;
}

TTRL_MULTIVERSION
void axpy(float alpha, const float* x, float* y, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}

std::vector<at::Tensor> token_stats_cpu(const at::Tensor& hidden, const at::Tensor& weight,
                                        const at::Tensor& token_ids, const c10::optional<at::Tensor>& bias,
                                        double temperature, int64_t block_v, int64_t block_m) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2, "hidden [M,H] and weight [V,H] expected");
  const int64_t M = hidden.size(0), H = hidden.size(1), V = weight.size(0);
  const float inv_t = static_cast<float>(1.0 / temperature);
  at::Tensor h = (hidden.to(at::kFloat) * inv_t).contiguous();
  at::Tensor ids = token_ids.to(at::kLong).contiguous();
  at::Tensor bias_t;
  if (bias.has_value()) bias_t = (bias->to(at::kFloat) * inv_t).contiguous();
  const float* bptr = bias.has_value() ? bias_t.data_ptr<float>() : nullptr;
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor m = at::full({M}, kNegInf, f32), s = at::zeros({M}, f32), t = at::zeros({M}, f32);
  at::Tensor zy = at::zeros({M}, f32), wsum = at::zeros({H}, f32);
  block_v = std::max<int64_t>(1, std::min(block_v, V));
  block_m = std::max<int64_t>(1, std::min(block_m, M));
  at::Tensor tile = at::empty({block_m, block_v}, f32);
  float *mp = m.data_ptr<float>(), *sp = s.data_ptr<float>(), *tp = t.data_ptr<float>(), *zp = zy.data_ptr<float>();
  const int64_t* idp = ids.data_ptr<int64_t>();
  for (int64_t v0 = 0; v0 < V; v0 += block_v) {
    const int64_t bv = std::min(block_v, V - v0);
    at::Tensor w = weight.narrow(0, v0, bv).to(at::kFloat).contiguous();
    wsum.add_(w.sum(0));
    for (int64_t r0 = 0; r0 < M; r0 += block_m) {
      const int64_t bm = std::min(block_m, M - r0);
      at::Tensor z = tile.view(-1).narrow(0, 0, bm * bv).view({bm, bv});
      at::mm_out(z, h.narrow(0, r0, bm), w.t());
      float* zbase = z.data_ptr<float>();
      const int64_t ld = bv;
      at::parallel_for(0, bm, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          float* zr = zbase + r * ld;
          if (bptr) {
            const float* br = bptr + v0;
#pragma omp simd
            for (int64_t j = 0; j < bv; ++j) zr[j] += br[j];
          }
          const float bmax = row_max(zr, bv);
          const int64_t row = r0 + r;
          const float m_old = mp[row];
          const float m_new = std::max(m_old, bmax);
          const float alpha = (m_old == kNegInf) ? 0.0f : std::exp(m_old - m_new);
          float se, te;
          row_exp_sums(zr, bv, m_new, &se, &te);
          sp[row] = sp[row] * alpha + se;
          tp[row] = tp[row] * alpha + te;
          mp[row] = m_new;
          const int64_t y = idp[row];
          if (y >= v0 && y < v0 + bv) zp[row] = zr[y - v0];
        }
      });
    }
  }
  at::Tensor lse = m + at::log(s);
  at::Tensor entropy = lse - t / s;
  at::Tensor mean_z = at::mv(h, wsum / static_cast<double>(V));
  if (bias.has_value()) mean_z = mean_z + bias_t.mean();
  at::Tensor self_certainty = lse - mean_z - std::log(static_cast<double>(V));
  at::Tensor logprob = at::where(ids >= 0, zy - lse, at::zeros_like(lse));
  return {logprob, entropy, self_certainty, lse};
}

std::vector<at::Tensor> attention_with_mass_cpu(const at::Tensor& q_in, const at::Tensor& k_in,
                                                const at::Tensor& v_in, const at::Tensor& groups_in,
                                                int64_t num_groups, bool causal, double scale) {
  TORCH_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, "q, k, v must be [B, H, T, d]");
  const int64_t B = q_in.size(0), Hq = q_in.size(1), Tq = q_in.size(2), D = q_in.size(3);
  const int64_t Hkv = k_in.size(1), Tk = k_in.size(2), G = num_groups;
  TORCH_CHECK(Hq % Hkv == 0, "Hq must be a multiple of Hkv");
  const int64_t rep = Hq / Hkv, off = Tk - Tq;
  at::Tensor q = (q_in.to(at::kFloat) * scale).contiguous();
  at::Tensor k = k_in.to(at::kFloat).contiguous(), v = v_in.to(at::kFloat).contiguous();
  at::Tensor groups = groups_in.to(at::kLong).contiguous();
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor out = at::zeros({B, Hq, Tq, D}, f32), mass = at::zeros({B, Hq, Tq, G}, f32);
  const float *qp = q.data_ptr<float>(), *kp = k.data_ptr<float>(), *vp = v.data_ptr<float>();
  const int64_t* gp = groups.data_ptr<int64_t>();
  float *op = out.data_ptr<float>(), *mp = mass.data_ptr<float>();
  constexpr int64_t BQ = 16, BK = 64;
  const int64_t nqb = (Tq + BQ - 1) / BQ;
  at::parallel_for(0, B * Hq * nqb, 1, [&](int64_t lo, int64_t hi) {
    std::vector<float> sc(BQ * BK), acc(BQ * D), gs(BQ * G), rmax(BQ), rsum(BQ);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, b = bh / Hq, hq = bh % Hq, hk = hq / rep;
      const int64_t i0 = qb * BQ, nq = std::min(BQ, Tq - i0);
      const float* qrow = qp + ((b * Hq + hq) * Tq + i0) * D;
      const float* kh = kp + (b * Hkv + hk) * Tk * D;
      const float* vh = vp + (b * Hkv + hk) * Tk * D;
      const int64_t* g = gp + b * Tk;
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(gs.begin(), gs.end(), 0.0f);
      std::fill(rmax.begin(), rmax.end(), kNegInf);
      std::fill(rsum.begin(), rsum.end(), 0.0f);
      const int64_t kend = causal ? std::min(Tk, i0 + nq + off) : Tk;
      for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        const int64_t nk = std::min(BK, kend - j0);
        for (int64_t r = 0; r < nq; ++r) {
          const float* qr = qrow + r * D;
          const int64_t last = causal ? i0 + r + off : Tk - 1;  // last visible key of this row
          float bmax = kNegInf;
          for (int64_t c = 0; c < nk; ++c) {
            const int64_t j = j0 + c;
            float sdot = kNegInf;
            if (j <= last && g[j] >= 0) {
              sdot = dot(qr, kh + j * D, D);
            }
            sc[r * BK + c] = sdot;
            bmax = std::max(bmax, sdot);
          }
          if (bmax == kNegInf) continue;  // no visible key in this block for this row
          const float m_new = std::max(rmax[r], bmax);
          const float alpha = (rmax[r] == kNegInf) ? 0.0f : std::exp(rmax[r] - m_new);
          rmax[r] = m_new;
          rsum[r] *= alpha;
          float* ar = acc.data() + r * D;
          float* gr = gs.data() + r * G;
          if (alpha != 1.0f) {
            for (int64_t x = 0; x < D; ++x) ar[x] *= alpha;
            for (int64_t x = 0; x < G; ++x) gr[x] *= alpha;
          }
          for (int64_t c = 0; c < nk; ++c) {
            const float sv = sc[r * BK + c];
            if (sv == kNegInf) continue;
            const float p = exp_nonpos(sv - m_new);
            rsum[r] += p;
            gr[g[j0 + c]] += p;
            axpy(p, vh + (j0 + c) * D, ar, D);
          }
        }
      }
      for (int64_t r = 0; r < nq; ++r) {
        if (rsum[r] == 0.0f) continue;  // the row saw no key: out = 0, mass = 0
        const float inv = 1.0f / rsum[r];
        float* orow = op + ((b * Hq + hq) * Tq + i0 + r) * D;
        float* mrow = mp + ((b * Hq + hq) * Tq + i0 + r) * G;
        for (int64_t x = 0; x < D; ++x) orow[x] = acc[r * D + x] * inv;
        for (int64_t x = 0; x < G; ++x) mrow[x] = gs[r * G + x] * inv;
      }
    }
  });
  return {out.to(q_in.scalar_type()), mass};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ttrl_lightning CPU kernels (OpenMP): fused token statistics and attention with group mass";
  m.def("token_stats", &token_stats_cpu, "fused linear + online log-sum-exp token statistics (CPU)",
        py::arg("hidden"), py::arg("weight"), py::arg("token_ids"), py::arg("bias"), py::arg("temperature"),
        py::arg("block_v") = 4096, py::arg("block_m") = 1024);
  m.def("attention_with_mass", &attention_with_mass_cpu, "streaming attention with key-group mass (CPU)",
        py::arg("q"), py::arg("k"), py::arg("v"), py::arg("key_groups"), py::arg("num_groups"),
        py::arg("causal"), py::arg("scale"));
  m.def("openmp_threads", []() { return at::get_num_threads(); });
}
