// Python bindings of the CPU kernels (selfhost/cpu_kernels.py loads this extension). Every entry
// releases the GIL while it runs: the engine steps in its own thread (async_engine.py), and a
// decode step spends ~95 % of its time in forward_layers; holding the GIL there kept the server's
// event loop (detokenising, streaming the previous token) from running beside it.
#include "cpu_kernels.h"
#include "cpu_pool.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("linear", &lantern::linear, release());
  m.def("linear_logits", &lantern::linear_logits, release());
  m.def("set_linear_amx", &lantern::set_linear_amx, pybind11::arg("enabled"),
        pybind11::arg("min_rows") = 8);
  m.def("set_gemv_prefetch", &lantern::set_gemv_prefetch);
  m.def("set_gemm_group_prefetch", &lantern::set_gemm_group_prefetch);
  m.def("set_gemv_spans", &lantern::set_gemv_spans);
  m.def("set_pool_spin_us", &lantern::set_pool_spin_us);
  m.def("rope_write_kv", &lantern::rope_write_kv, release());
  m.def("paged_attention_supports", &lantern::paged_attention_supports);
  m.def("paged_decode", &lantern::paged_decode, release());
  m.def("paged_prefill", &lantern::paged_prefill, release());
  m.def("prefill_attention", &lantern::prefill_attention, release());
  m.def("argmax_rows", &lantern::argmax_rows, release());
  m.def("forward_layers", &lantern::forward_layers, release());
}
