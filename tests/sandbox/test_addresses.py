from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox.addresses import deny_reason, parse_cidrs, parse_ip_literal


@pytest.mark.parametrize(
    ("literal", "address"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x7f.1", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("[::1]", "::1"),
        ("[fe80::1%25eth0]", "fe80::1"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("169.254.169.254", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
    ],
)
def test_every_spelling_is_a_literal(literal: str, address: str) -> None:
    assert parse_ip_literal(literal) == ipaddress.ip_address(address)


@pytest.mark.parametrize("name", ["api.example.com", "127.0.0.1.nip.io", "localhost", "0x.example"])
def test_names_are_not_literals(name: str) -> None:
    assert parse_ip_literal(name) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("10.0.0.5", "private"),
        ("172.16.3.4", "private"),
        ("192.168.1.1", "private"),
        ("127.0.0.1", "loopback"),
        ("0.0.0.0", "this-network"),
        ("100.64.0.1", "cgnat"),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("169.254.1.1", "link-local"),
        ("fd00:ec2::254", "metadata"),
        ("::1", "loopback"),
        ("fc00::1", "unique-local"),
        ("fe80::1", "link-local"),
        ("198.18.0.1", "benchmarking"),
        ("240.0.0.1", "reserved"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "reserved"),
        ("192.0.0.8", "ietf-protocol"),
        ("::ffff:10.0.0.1", "embedded-ipv4:private"),
        ("64:ff9b::a00:1", "embedded-ipv4:private"),
        ("2002:a00:1::1", "embedded-ipv4:private"),
        ("::ffff:169.254.169.254", "metadata"),
        ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "teredo"),
        ("93.184.216.34", None),
        ("2606:4700::1111", None),
    ],
)
def test_classification(address: str, reason: str | None) -> None:
    assert deny_reason(ipaddress.ip_address(address)) == reason


def test_operator_cidrs_open_exactly_what_they_name_but_never_metadata() -> None:
    allowed = parse_cidrs(["127.0.0.2/32", "169.254.0.0/16"])
    assert deny_reason(ipaddress.ip_address("127.0.0.2"), allowed) is None
    assert deny_reason(ipaddress.ip_address("127.0.0.1"), allowed) == "loopback"
    assert deny_reason(ipaddress.ip_address("169.254.169.254"), allowed) == "metadata"
    assert deny_reason(ipaddress.ip_address("::ffff:127.0.0.2"), allowed) is None


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_every_legacy_spelling_of_an_ipv4_address_is_the_same_literal(number: int) -> None:
    address = ipaddress.IPv4Address(number)
    octets = str(address).split(".")
    spellings = [
        str(number),
        hex(number),
        ".".join(f"0{int(o):o}" for o in octets),
        ".".join(hex(int(o)) for o in octets),
        f"{octets[0]}.{int(octets[1]) << 16 | int(octets[2]) << 8 | int(octets[3])}",
        f"[::ffff:{address}]",
    ]
    for spelling in spellings:
        parsed = parse_ip_literal(spelling)
        assert parsed is not None
        assert (parsed.ipv4_mapped if parsed.version == 6 else parsed) == address  # type: ignore[union-attr]


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_wrapping_in_ipv6_never_changes_the_verdict(number: int) -> None:
    address = ipaddress.IPv4Address(number)
    direct = deny_reason(address)
    for wrapped in (f"::ffff:{address}", f"64:ff9b::{address}"):
        reason = deny_reason(ipaddress.ip_address(wrapped))
        if direct is None:
            assert reason is None
        else:
            assert reason in (direct, f"embedded-ipv4:{direct}")
