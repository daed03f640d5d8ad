// CPU kernels of the per-token signal ops (one translation unit, OpenMP through at::parallel_for).
//
// token_stats_cpu: for each vocabulary block, one GEMM tile (at::mm_out into a reused buffer) and a fused
//   single-pass epilogue per row: running max m, s = sum exp(z - m), t = sum z exp(z - m) (rescaled when m
//   grows), and the label logit. lse = m + log s, entropy = lse - t / s. Peak extra memory: one tile.
// attention_with_mass_cpu: flash-style streaming attention per (batch, head, query block) with blocked GEMMs;
//   the running max, the output accumulator and one running sum per key group (indicator value columns) are
//   rescaled together. Never builds [Tq, Tk]. Padding keys (group < 0) get -inf; causal mask bottom-right.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../common/cpu_math.h"

namespace {

using ttrl::exp_nonpos;
using ttrl::kNegInf;
using ttrl::row_max;

// One row of a logits tile: s = sum e^{z-m}, t = sum z e^{z-m} (m: the running max, from row_max).
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

// In-place p = exp(s - m) over one score row; returns sum p. Masked scores (-inf) give exactly 0.
TTRL_MULTIVERSION
float row_exp_inplace(float* s, int64_t n, float m) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) {
    const float x = s[j] - m;
    const float e = x < -87.0f ? 0.0f : exp_nonpos(x);
    s[j] = e;
    sum += e;
  }
  return sum;
}

TTRL_MULTIVERSION
void scale_add(float* s, float a, const float* bias, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] = s[j] * a + bias[j];
}

TTRL_MULTIVERSION
void row_scale(float* x, int64_t n, float a) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

// Flash-style attention with key-group mass on CPU. Per task (batch, query head, block of BQ queries) and per
// block of BK keys: S = Q K^T (one GEMM), masking, running max and p = exp(S - m) in place, then
// acc += P [V | 1_groups] (one GEMM over values augmented with one indicator column per group, so the group
// sums ride in the accumulator and are rescaled with it). The denominator is the sum of the indicator
// columns plus nothing else, since padding keys never get weight. Never builds [Tq, Tk].
std::vector<at::Tensor> attention_with_mass_cpu(const at::Tensor& q_in, const at::Tensor& k_in,
                                                const at::Tensor& v_in, const at::Tensor& groups_in,
                                                int64_t num_groups, bool causal, double scale, int64_t block_q,
                                                int64_t block_k) {
  TORCH_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4, "q, k, v must be [B, H, T, d]");
  TORCH_CHECK(block_q > 0 && block_k > 0, "block sizes must be positive");
  const int64_t B = q_in.size(0), Hq = q_in.size(1), Tq = q_in.size(2), D = q_in.size(3);
  const int64_t Hkv = k_in.size(1), Tk = k_in.size(2), G = num_groups, DA = D + G;
  TORCH_CHECK(Hq % Hkv == 0, "Hq must be a multiple of Hkv");
  const int64_t rep = Hq / Hkv, off = Tk - Tq;
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor q = q_in.to(at::kFloat).contiguous();  // no copy for contiguous float32 inputs
  at::Tensor k = k_in.to(at::kFloat).contiguous();
  const float fscale = static_cast<float>(scale);
  at::Tensor groups = groups_in.to(at::kLong).contiguous();
  at::Tensor valid = groups.ge(0);
  // values augmented with indicator columns: vaug[b, h, j] = [v_j, 1[g_j == 0], ..., 1[g_j == G-1]]
  at::Tensor onehot = at::one_hot(groups.clamp_min(0), G).to(at::kFloat) * valid.unsqueeze(-1).to(at::kFloat);
  at::Tensor vaug = at::cat({v_in.to(at::kFloat), onehot.unsqueeze(1).expand({B, Hkv, Tk, G})}, -1).contiguous();
  // additive key bias: 0 for keys, -inf for padding
  at::Tensor kbias = at::where(valid, at::zeros({}, f32), at::full({}, kNegInf, f32)).to(at::kFloat).contiguous();
  at::Tensor out = at::empty({B, Hq, Tq, D}, f32), mass = at::empty({B, Hq, Tq, G}, f32);
  const float* kb_ptr = kbias.data_ptr<float>();
  float *op = out.data_ptr<float>(), *mp = mass.data_ptr<float>();
  const int64_t BQ = block_q, BK = block_k;
  const int64_t nqb = (Tq + BQ - 1) / BQ;
  at::parallel_for(0, B * Hq * nqb, 1, [&](int64_t lo, int64_t hi) {
    at::Tensor sbuf = at::empty({BQ * BK}, f32), abuf = at::empty({BQ * DA}, f32);
    std::vector<float> rmax(BQ), rsum(BQ);
    for (int64_t task = lo; task < hi; ++task) {
      const int64_t qb = task % nqb, bh = task / nqb, b = bh / Hq, hq = bh % Hq, hk = hq / rep;
      const int64_t i0 = qb * BQ, nq = std::min(BQ, Tq - i0);
      at::Tensor qblk = q[b][hq].narrow(0, i0, nq);
      at::Tensor kh = k[b][hk], vh = vaug[b][hk];
      const float* kbias_b = kb_ptr + b * Tk;
      at::Tensor acc = abuf.narrow(0, 0, nq * DA).view({nq, DA});
      acc.zero_();
      float* accp = acc.data_ptr<float>();
      std::fill(rmax.begin(), rmax.end(), kNegInf);
      const int64_t kend = causal ? std::min(Tk, i0 + nq + off) : Tk;
      for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        const int64_t nk = std::min(BK, kend - j0);
        at::Tensor sc = sbuf.narrow(0, 0, nq * nk).view({nq, nk});
        at::mm_out(sc, qblk, kh.narrow(0, j0, nk).t());
        float* sp = sc.data_ptr<float>();
        bool any = false;
        for (int64_t r = 0; r < nq; ++r) {
          float* srow = sp + r * nk;
          scale_add(srow, fscale, kbias_b + j0, nk);  // s * scale, padding keys -> -inf
          if (causal) {
            const int64_t last = i0 + r + off;  // last visible key of this row
            for (int64_t j = std::max<int64_t>(last + 1 - j0, 0); j < nk; ++j) srow[j] = kNegInf;
          }
          const float bmax = row_max(srow, nk);
          if (bmax == kNegInf) {  // no visible key in this block for this row
            std::fill(srow, srow + nk, 0.0f);
            continue;
          }
          any = true;
          const float m_new = std::max(rmax[r], bmax);
          if (rmax[r] != kNegInf && m_new != rmax[r]) row_scale(accp + r * DA, DA, std::exp(rmax[r] - m_new));
          rmax[r] = m_new;
          row_exp_inplace(srow, nk, m_new);
        }
        if (any) acc.addmm_(sc, vh.narrow(0, j0, nk));
      }
      for (int64_t r = 0; r < nq; ++r) {
        const float* arow = accp + r * DA;
        float l = 0.0f;
        for (int64_t x = 0; x < G; ++x) l += arow[D + x];
        float* orow = op + ((b * Hq + hq) * Tq + i0 + r) * D;
        float* mrow = mp + ((b * Hq + hq) * Tq + i0 + r) * G;
        if (l == 0.0f) {  // the row saw no key: out = 0, mass = 0 (NaN propagates)
          std::fill(orow, orow + D, 0.0f);
          std::fill(mrow, mrow + G, 0.0f);
          continue;
        }
        const float inv = 1.0f / l;
        for (int64_t x = 0; x < D; ++x) orow[x] = arow[x] * inv;
        for (int64_t x = 0; x < G; ++x) mrow[x] = arow[D + x] * inv;
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
        py::arg("causal"), py::arg("scale"), py::arg("block_q") = 64, py::arg("block_k") = 256);
  m.def("openmp_threads", []() { return at::get_num_threads(); });
}
