"""How many of one tenant's continuations may read and expand their stored conversations at
once. A body of a hundred bytes names a conversation of megabytes, read and parsed before any
quota is asked (the quotas need its tokens): unbounded, one tenant's flood of them would hold
the worker threads and the memory every tenant's calls need. Holds no conversation itself.
"""

from __future__ import annotations

from gateway.core.tenant_gate import TenantGate

__all__ = ["READS_PER_TENANT", "TenantGate"]

READS_PER_TENANT = 4  # a tenant's parallel agents still read short conversations in parallel
