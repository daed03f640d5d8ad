// Torch bindings of the CUDA signal kernels (csrc/signals/signals_cuda.cu). Built only with a CUDA build of
// torch (setup.py); the kernels themselves are plain CUDA with raw pointers.
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <cuda_runtime.h>

#include <vector>

extern "C" int ttrl_token_stats_cuda(const void* hidden, const void* weight, const void* bias, const int64_t* ids,
                                     float* part, int64_t M, int64_t V, int64_t H, float inv_t, int64_t split_v,
                                     int dtype, cudaStream_t stream);
extern "C" int ttrl_attention_mass_cuda(const void* q, const void* k, const void* v, const int64_t* groups, void* out,
                                        float* mass, int B, int Hq, int Hkv, int64_t Tq, int64_t Tk, int D, int G,
                                        bool causal, float scale, int dtype, cudaStream_t stream);

namespace {

int dtype_code(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return 0;
    case at::kBFloat16: return 1;
    case at::kHalf: return 2;
    default: TORCH_CHECK(false, "unsupported dtype ", t.scalar_type(), " (float32, bfloat16, float16)");
  }
  return -1;
}

void check_launch(int err, const char* what) {
  TORCH_CHECK(err == 0, what, " failed: ", cudaGetErrorString(static_cast<cudaError_t>(err)));
}

// Returns the per-split partials [splits, 4, M] = (max, sum e, sum z e, label logit); merged in Python.
at::Tensor token_stats_partials(const at::Tensor& hidden, const at::Tensor& weight, const at::Tensor& token_ids,
                                const c10::optional<at::Tensor>& bias, double temperature, int64_t split_v) {
  TORCH_CHECK(hidden.is_cuda() && weight.is_cuda() && token_ids.is_cuda(), "CUDA tensors expected");
  const c10::cuda::CUDAGuard device_guard(hidden.device());
  at::Tensor h = hidden.contiguous();
  at::Tensor w = weight.to(h.scalar_type()).contiguous();
  at::Tensor ids = token_ids.to(at::kLong).contiguous();
  at::Tensor b;
  if (bias.has_value()) b = bias->to(h.scalar_type()).contiguous();
  const int64_t M = h.size(0), H = h.size(1), V = w.size(0);
  const int64_t splits = (V + split_v - 1) / split_v;
  at::Tensor part = at::empty({splits, 4, M}, h.options().dtype(at::kFloat));
  check_launch(ttrl_token_stats_cuda(h.data_ptr(), w.data_ptr(), bias.has_value() ? b.data_ptr() : nullptr,
                                     ids.data_ptr<int64_t>(), part.data_ptr<float>(), M, V, H,
                                     static_cast<float>(1.0 / temperature), split_v, dtype_code(h),
                                     c10::cuda::getCurrentCUDAStream().stream()),
               "token_stats kernel");
  return part;
}

std::vector<at::Tensor> attention_with_mass(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                            const at::Tensor& key_groups, int64_t num_groups, bool causal,
                                            double scale) {
  TORCH_CHECK(q.is_cuda() && k.is_cuda() && v.is_cuda() && key_groups.is_cuda(), "CUDA tensors expected");
  const c10::cuda::CUDAGuard device_guard(q.device());
  at::Tensor qc = q.contiguous(), kc = k.to(q.scalar_type()).contiguous(), vc = v.to(q.scalar_type()).contiguous();
  at::Tensor g = key_groups.to(at::kLong).contiguous();
  const int64_t B = q.size(0), Hq = q.size(1), Tq = q.size(2), D = q.size(3), Hkv = k.size(1), Tk = k.size(2);
  at::Tensor out = at::empty_like(qc);
  at::Tensor mass = at::zeros({B, Hq, Tq, num_groups}, q.options().dtype(at::kFloat));
  check_launch(ttrl_attention_mass_cuda(qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), g.data_ptr<int64_t>(),
                                        out.data_ptr(), mass.data_ptr<float>(), static_cast<int>(B),
                                        static_cast<int>(Hq), static_cast<int>(Hkv), Tq, Tk, static_cast<int>(D),
                                        static_cast<int>(num_groups), causal, static_cast<float>(scale),
                                        dtype_code(qc), c10::cuda::getCurrentCUDAStream().stream()),
               "attention_with_mass kernel (head dim <= 256, groups <= 32)");
  return {out, mass};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "ttrl_lightning CUDA kernels: fused token statistics and attention with group mass";
  m.def("token_stats_partials", &token_stats_partials, py::arg("hidden"), py::arg("weight"), py::arg("token_ids"),
        py::arg("bias"), py::arg("temperature"), py::arg("split_v") = 4096);
  m.def("attention_with_mass", &attention_with_mass, py::arg("q"), py::arg("k"), py::arg("v"),
        py::arg("key_groups"), py::arg("num_groups"), py::arg("causal"), py::arg("scale"));
}
