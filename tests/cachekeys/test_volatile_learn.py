"""Learning a volatile place from two versions of a system text: one short value on one line,
between the same context, becomes a pattern matching exactly the values it was learnt from."""

from __future__ import annotations

import re

from cachekeys.volatile_learn import learn_place


def test_a_counter_is_learnt_with_its_context_and_matches_later_values() -> None:
    old, new = "You are X. Build 48213 of it.", "You are X. Build 48214 of it."
    pattern = learn_place(old, new)
    assert pattern == r"(?<=You\ are\ X\.\ Build\ )[^\n]{1,64}?(?=\ of\ it\.)"
    found = re.search(pattern, "You are X. Build 7 of it.")
    assert found is not None and found.group(0) == "7"


def test_a_value_is_widened_to_whole_words() -> None:
    pattern = learn_place("nonce=Xk3j9Q end", "nonce=Xk3zz1 end")
    assert pattern is not None
    assert [re.search(pattern, t).group(0) for t in ("nonce=Xk3j9Q end", "nonce=A end")] == [  # type: ignore[union-attr]
        "Xk3j9Q",
        "A",
    ]


def test_words_without_digits_need_a_second_change() -> None:
    assert learn_place("Mood: calm today.", "Mood: tense today.") is None
    assert learn_place("Mood: calm today.", "Mood: tense today.", repeated=True) is not None


def test_an_instruction_edit_is_not_a_value() -> None:
    assert learn_place("Be concise.\nRules.", "Be concise.\nRules 2.\nMore rules 3.") is None
    assert learn_place("a" * 10 + "1" * 80 + "b", "a" * 10 + "2" * 80 + "b") is None  # too long
    assert learn_place("same", "same") is None
