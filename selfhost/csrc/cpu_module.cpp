// Python bindings of the CPU kernels (selfhost/cpu_kernels.py loads this extension).
#include "cpu_kernels.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("linear", &lantern::linear);
  m.def("set_linear_amx", &lantern::set_linear_amx, pybind11::arg("enabled"),
        pybind11::arg("min_rows") = 8);
  m.def("set_gemv_prefetch", &lantern::set_gemv_prefetch);
  m.def("rope_write_kv", &lantern::rope_write_kv);
  m.def("paged_attention_supports", &lantern::paged_attention_supports);
  m.def("paged_decode", &lantern::paged_decode);
  m.def("paged_prefill", &lantern::paged_prefill);
  m.def("prefill_attention", &lantern::prefill_attention);
  m.def("forward_layers", &lantern::forward_layers);
}
