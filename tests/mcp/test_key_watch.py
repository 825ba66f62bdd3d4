"""`KeyWatch`, in process: each round asks about every key that holds a session or a listen
stream, ends what a key that may no longer call holds (its listens, then its sessions), leaves
the others alone, and goes on after a round that fails."""

from __future__ import annotations

import asyncio
import logging

from gateway.mcp.key_watch import KeyWatch

LOG = logging.getLogger("test")


class Held:
    """Sessions or listens: the keys holding one, and the keys told to end."""

    def __init__(self, keys: set[tuple[str, str]]) -> None:
        self.open = set(keys)
        self.ended: list[tuple[str, str]] = []

    def keys(self) -> set[tuple[str, str]]:
        return set(self.open)

    def end_key(self, tenant: str, key_id: str) -> None:
        self.ended.append((tenant, key_id))
        self.open.discard((tenant, key_id))


class Sessions(Held):
    async def end_key(self, tenant: str, key_id: str) -> None:  # type: ignore[override]
        await asyncio.sleep(0)
        super().end_key(tenant, key_id)


def test_the_watch_ends_only_what_keys_that_may_no_longer_call_hold() -> None:
    async def main() -> None:
        sessions = Sessions({("acme", "k2"), ("acme", "k1")})
        listens = Held({("acme", "k2"), ("globex", "k2")})
        asked: list[tuple[str, str]] = []

        def usable(tenant: str, key_id: str) -> bool:
            asked.append((tenant, key_id))
            return (tenant, key_id) != ("acme", "k2")

        watch = KeyWatch(usable, sessions, listens, LOG)  # type: ignore[arg-type]
        await watch.check()
        assert sorted(asked) == [("acme", "k1"), ("acme", "k2"), ("globex", "k2")]
        assert sessions.ended == [("acme", "k2")] and listens.ended == [("acme", "k2")]
        assert sessions.keys() == {("acme", "k1")} and listens.keys() == {("globex", "k2")}
        asked.clear()
        await watch.check()  # nothing left to end: nothing ended twice
        assert sorted(asked) == [("acme", "k1"), ("globex", "k2")]
        assert sessions.ended == [("acme", "k2")]

    asyncio.run(main())


def test_a_failing_round_never_ends_the_watch() -> None:
    async def main() -> None:
        calls = 0

        def usable(tenant: str, key_id: str) -> bool:
            nonlocal calls
            calls += 1
            raise RuntimeError("key store unreadable")

        watch = KeyWatch(usable, Sessions(set()), Held({("acme", "k1")}), LOG)  # type: ignore[arg-type]
        task = asyncio.create_task(watch.run(0.01))
        await asyncio.sleep(0.1)
        assert calls >= 3 and not task.done()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
