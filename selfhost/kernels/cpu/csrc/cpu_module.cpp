// Python bindings of the CPU kernels (selfhost/kernels/cpu/loader.py loads this extension). Every entry
// releases the GIL while it runs: the engine steps in its own thread (async_engine.py), and a
// decode step spends ~95 % of its time in forward_layers; holding the GIL there kept the server's
// event loop (detokenising, streaming the previous token) from running beside it.
#include "cpu_kernels.h"
#include "cpu_pool.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  using release = pybind11::call_guard<pybind11::gil_scoped_release>;
  m.def("linear", &lantern::linear, release());
  m.def("linear_logits", &lantern::linear_logits, release());
  m.def("rope_write_kv", &lantern::rope_write_kv, release());
  m.def("paged_attention_supports", &lantern::paged_attention_supports);
  m.def("paged_decode", &lantern::paged_decode, release());
  m.def("paged_prefill", &lantern::paged_prefill, release());
  m.def("prefill_attention", &lantern::prefill_attention, release());
  m.def("argmax_rows", &lantern::argmax_rows, release());
  m.def("forward_layers", &lantern::forward_layers, release());
}
