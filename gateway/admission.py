class Admission:
    @classmethod
    def from_settings(cls, settings, registry=None): return cls()
    async def start(self, engine): pass
    async def aclose(self): pass
    async def reserve(self, tenant, *, session_id, prompt_tokens, max_output_tokens, worst_case_usd): return object()
    async def settle(self, ticket, *, usage, cost_usd): pass
    def rate_headers(self, ticket): return {}
