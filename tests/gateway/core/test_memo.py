from dataclasses import dataclass

from gateway.core.memo import PerObjectMemo


@dataclass(frozen=True)
class Policy:
    limit: int


def test_one_build_per_object_and_a_new_object_is_built_afresh() -> None:
    builds: list[int] = []

    def build(policy: Policy) -> int:
        builds.append(policy.limit)
        return policy.limit * 2

    memo = PerObjectMemo(build)
    first = Policy(10)
    assert memo(first) == memo(first) == 20
    reloaded = Policy(10)  # equal but a new object: a reload
    assert memo(reloaded) == 20
    assert memo(Policy(7)) == 14
    assert builds == [10, 10, 7]


def test_an_identity_reused_after_the_entry_was_dropped_is_not_confused() -> None:
    memo = PerObjectMemo(lambda policy: policy.limit, bound=2)
    kept = [Policy(n) for n in range(5)]  # alive, so every id is distinct
    assert [memo(p) for p in kept] == [0, 1, 2, 3, 4]
    assert len(memo._entries) <= 2
    assert [memo(p) for p in kept] == [0, 1, 2, 3, 4]


def test_the_entry_checks_the_object_not_only_its_id() -> None:
    memo = PerObjectMemo(lambda policy: policy.limit)
    first = Policy(1)
    memo(first)
    impostor = Policy(2)
    memo._entries[id(impostor)] = (first, 1)  # as if `first` had died and its id been reused
    assert memo(impostor) == 2
