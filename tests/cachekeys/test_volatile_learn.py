"""Learning a volatile place from two versions of a system text: one short value on one line,
between the same context, becomes a pattern matching exactly the values it was learnt from."""

from __future__ import annotations

import re

from cachekeys.volatile import Relocator, VolatileMatcher
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


def test_a_frozen_place_keeps_its_value_and_names_the_newest_at_the_tail() -> None:
    pattern = learn_place("Build 48213 of the workspace.", "Build 48214 of the workspace.")
    assert pattern is not None
    frozen = VolatileMatcher.per_call((), [pattern], {pattern: "48213"})
    same = Relocator(frozen)
    assert same.text("Build 48213 of the workspace.") == "Build 48213 of the workspace."
    assert same.block_text() is None  # the value is the one kept: nothing to add
    moved = Relocator(frozen)
    text = "Now 2026-11-30T09:18:42Z.\nBuild 48215 of the workspace."
    assert moved.text(text) == "Now {{volatile:1}}.\nBuild 48213 of the workspace."
    assert moved.block_text() == (
        "<volatile-context>\n{{volatile:1}} = 2026-11-30T09:18:42Z\n"
        'in "Build 48213 of the workspace.", 48213 is now 48215'
    )
    assert moved.kinds == {"iso_datetime", "learned"}
    placeholder = Relocator(VolatileMatcher.per_call((), [pattern]))  # a later session
    assert (
        placeholder.text("Build 48215 of the workspace.")
        == "Build {{volatile:1}} of the workspace."
    )


def test_a_change_of_more_than_one_word_is_not_a_value() -> None:
    assert learn_place("Follow the rules. r r", "New rules at 2026-11-30. r r") is None
    # the context stays on the value's line (a scope line above it changes nothing)
    pattern = learn_place("scope\nBuild 1 of it", "scope\nBuild 2 of it")
    assert pattern is not None
    assert re.search(pattern, "other\nBuild 3 of it") is not None
