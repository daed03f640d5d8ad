// CPU tile epilogues of linear_logprobs (ttrl_lightning/ops/linear_logprobs.py drives the chunks and GEMMs).
//
// forward_tile: one float32 logits tile z [R, C] of vocabulary columns [v0, v0 + C); per row, in one pass after
//   the row max: m_new = max(m, max z), alpha = e^(m - m_new), s <- alpha s + sum e, t <- alpha t + sum e z with
//   e = e^(z - m_new); the label logit is kept when the label is in the tile. Optionally writes e over z and
//   e * z into ez (the frozen-head plan accumulates sum e W and sum e z W from them). Returns alpha [R].
// backward_tile: a recomputed tile becomes grad_z = g delta_vy - p (g + g_H (z - mu)), p = e^(z - lse), in place.
// Rows run in parallel (at::parallel_for, OpenMP); the inner loops vectorise (ttrl::exp_nonpos).
// The ops are registered in the `ttrl` library (torch.ops.ttrl.*): the extension's single PYBIND11_MODULE
// lives in csrc/signals/signals_cpu.cpp.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <cmath>

#include "../common/cpu_math.h"

namespace {

using ttrl::exp_nonpos;
using ttrl::kNegInf;

TTRL_MULTIVERSION
void exp_sums(float* z, int64_t n, float m, bool write_e, float* ez, float* s_out, float* t_out) {
  float se = 0.0f, te = 0.0f;
  if (!write_e && ez == nullptr) {
#pragma omp simd reduction(+ : se, te)
    for (int64_t j = 0; j < n; ++j) {
      const float e = exp_nonpos(z[j] - m);
      se += e;
      te += e * z[j];
    }
  } else {
#pragma omp simd reduction(+ : se, te)
    for (int64_t j = 0; j < n; ++j) {
      const float zj = z[j];
      const float e = exp_nonpos(zj - m);
      se += e;
      te += e * zj;
      if (ez != nullptr) ez[j] = e * zj;
      if (write_e) z[j] = e;
    }
  }
  *s_out = se;
  *t_out = te;
}

TTRL_MULTIVERSION
void grad_row(float* z, int64_t n, float lse, float g, bool with_entropy, float g_h, float mu) {
  if (with_entropy) {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) z[j] = -exp_nonpos(z[j] - lse) * (g + g_h * (z[j] - mu));
  } else {
#pragma omp simd
    for (int64_t j = 0; j < n; ++j) z[j] = -exp_nonpos(z[j] - lse) * g;
  }
}

void check_tile(const at::Tensor& z, const at::Tensor& ids, std::initializer_list<const at::Tensor*> rows) {
  TORCH_CHECK(z.dim() == 2 && z.scalar_type() == at::kFloat && z.is_contiguous(),
              "linear_logprobs tile: z must be a contiguous float32 [R, C] tensor");
  const int64_t R = z.size(0);
  TORCH_CHECK(ids.scalar_type() == at::kLong && ids.is_contiguous() && ids.numel() == R,
              "linear_logprobs tile: ids must be contiguous int64 [R]");
  for (const at::Tensor* t : rows)
    TORCH_CHECK(t->scalar_type() == at::kFloat && t->is_contiguous() && t->numel() == R,
                "linear_logprobs tile: row statistics must be contiguous float32 [R]");
}

at::Tensor forward_tile(const at::Tensor& z, const at::Tensor& m, const at::Tensor& s, const at::Tensor& t,
                        const at::Tensor& zy, const at::Tensor& ids, int64_t v0, bool write_e,
                        const at::Tensor& ez) {
  check_tile(z, ids, {&m, &s, &t, &zy});
  TORCH_CHECK(ez.numel() == 0 || (ez.sizes() == z.sizes() && ez.scalar_type() == at::kFloat && ez.is_contiguous()),
              "linear_logprobs tile: ez must be empty or a contiguous float32 tensor shaped like z");
  const int64_t R = z.size(0), C = z.size(1);
  at::Tensor alpha = at::empty({R}, z.options());
  float *zp = z.data_ptr<float>(), *mp = m.data_ptr<float>(), *sp = s.data_ptr<float>();
  float *tp = t.data_ptr<float>(), *zyp = zy.data_ptr<float>(), *ap = alpha.data_ptr<float>();
  float* ezp = ez.numel() ? ez.data_ptr<float>() : nullptr;
  const int64_t* idp = ids.data_ptr<int64_t>();
  at::parallel_for(0, R, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* zr = zp + r * C;
      const int64_t y = idp[r] - v0;
      if (y >= 0 && y < C) zyp[r] = zr[y];  // before z is overwritten by e
      const float m_old = mp[r];
      const float m_new = std::max(m_old, ttrl::row_max(zr, C));
      const float a = m_old == kNegInf ? 0.0f : std::exp(m_old - m_new);
      float se, te;
      exp_sums(zr, C, m_new, write_e, ezp ? ezp + r * C : nullptr, &se, &te);
      sp[r] = sp[r] * a + se;
      tp[r] = tp[r] * a + te;
      mp[r] = m_new;
      ap[r] = a;
    }
  });
  return alpha;
}

void backward_tile(const at::Tensor& z, const at::Tensor& lse, const at::Tensor& mu, const at::Tensor& g_logprob,
                   const at::Tensor& g_entropy, const at::Tensor& ids, int64_t v0) {
  check_tile(z, ids, {&lse, &mu, &g_logprob});
  const bool with_entropy = g_entropy.numel() != 0;
  if (with_entropy) check_tile(z, ids, {&g_entropy});
  const int64_t R = z.size(0), C = z.size(1);
  float* zp = z.data_ptr<float>();
  const float *lp = lse.data_ptr<float>(), *up = mu.data_ptr<float>(), *gp = g_logprob.data_ptr<float>();
  const float* hp = with_entropy ? g_entropy.data_ptr<float>() : nullptr;
  const int64_t* idp = ids.data_ptr<int64_t>();
  at::parallel_for(0, R, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      float* zr = zp + r * C;
      grad_row(zr, C, lp[r], gp[r], with_entropy, with_entropy ? hp[r] : 0.0f, up[r]);
      const int64_t y = idp[r] - v0;
      if (y >= 0 && y < C) zr[y] += gp[r];
    }
  });
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ttrl, m) {
  m.def("linear_logprobs_forward_tile(Tensor(a!) z, Tensor(b!) m, Tensor(c!) s, Tensor(d!) t, Tensor(e!) zy, "
        "Tensor ids, int v0, bool write_e, Tensor(f!) ez) -> Tensor");
  m.def("linear_logprobs_backward_tile(Tensor(a!) z, Tensor lse, Tensor mu, Tensor g_logprob, Tensor g_entropy, "
        "Tensor ids, int v0) -> ()");
}

TORCH_LIBRARY_IMPL(ttrl, CPU, m) {
  m.impl("linear_logprobs_forward_tile", &forward_tile);
  m.impl("linear_logprobs_backward_tile", &backward_tile);
}
