"""Which webhook URLs may be called: https and public addresses only, unless the
operator allows the host."""

from __future__ import annotations

import pytest

from convo_memory.adapters.tools.url_policy import ToolUrlRefused, UrlPolicy, is_public_address
from convo_memory.domain.allowed_hosts import AllowedHost, parse_allowed_hosts
from tests.fakes.adapters import FakeResolver


@pytest.mark.parametrize(
    "address",
    [
        "10.0.0.7",  # private
        "172.16.3.4",
        "192.168.1.1",
        "127.0.0.1",  # loopback
        "169.254.169.254",  # link-local: the instance metadata service
        "100.64.0.1",  # shared address space (carrier NAT)
        "0.0.0.0",  # unspecified
        "224.0.0.1",  # multicast
        "240.0.0.1",  # reserved
        "255.255.255.255",
        "192.0.2.10",  # documentation
        "::1",
        "fe80::1",
        "fd00:ec2::254",  # the metadata service over IPv6 (unique local)
        "ff02::1",
        "::",
        "::ffff:10.0.0.1",  # IPv4-mapped private
        "::ffff:169.254.169.254",
        "::ffff:127.0.0.1",
        "2002:a00:1::1",  # 6to4 carrying 10.0.0.1
        "64:ff9b::a00:1",  # NAT64 carrying 10.0.0.1
        "2001:0:4136:e378:8000:63bf:3fff:fdd2",  # Teredo
        "not an address",
    ],
)
def test_non_public_addresses_are_refused(address: str) -> None:
    assert not is_public_address(address)


@pytest.mark.parametrize(
    "address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"]
)
def test_public_addresses_pass(address: str) -> None:
    assert is_public_address(address)


def policy(allowed: str = "", **dns: list[str]) -> UrlPolicy:
    table = {
        "tools.example.com": ["93.184.216.34"],
        **{k.replace("_", "."): v for k, v in dns.items()},
    }
    return UrlPolicy(parse_allowed_hosts(allowed.split(",")), resolve=FakeResolver(table))


def test_an_https_url_on_a_public_host_is_allowed_and_pinned_to_its_address() -> None:
    target = policy().target("https://tools.example.com/track?v=2")
    assert (target.scheme, target.host, target.port, target.path, target.address) == (
        "https",
        "tools.example.com",
        443,
        "/track?v=2",
        "93.184.216.34",
    )
    assert not target.allowed_host


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://tools.example.com/track", "https"),
        # Private, unresolvable or both: the same words, never an address.
        ("https://localhost/x", "not allowed"),
        ("https://127.0.0.1/x", "not allowed"),
        ("https://169.254.169.254/latest/meta-data", "not allowed"),
        ("https://[::1]/x", "not allowed"),
        ("https://[::ffff:10.0.0.1]/x", "not allowed"),
        ("https://internal.example/x", "not allowed"),
        ("https://mixed.example/x", "not allowed"),
        ("https://nowhere.example/x", "not allowed"),
        ("ftp://tools.example.com/x", "https"),
        ("https://user:pw@tools.example.com/x", "credentials"),
    ],
)
def test_urls_that_are_not_https_or_not_public_are_refused(url: str, reason: str) -> None:
    rules = policy(
        internal_example=["10.1.2.3"],
        mixed_example=["93.184.216.34", "10.9.9.9"],  # one private answer is enough
    )
    problem = rules.problem(url)
    assert problem is not None and reason in problem
    with pytest.raises(ToolUrlRefused):
        rules.target(url)


def test_an_allowed_host_may_use_plain_http_and_any_address() -> None:
    rules = policy("127.0.0.1:8080,tools.internal", tools_internal=["10.0.3.7"])

    local = rules.target("http://127.0.0.1:8080/hook")
    assert (local.address, local.allowed_host) == ("127.0.0.1", True)
    assert rules.target("http://tools.internal/x").address == "10.0.3.7"
    assert rules.target("https://tools.internal:9443/x").port == 9443  # any port
    # The port is part of an allowed host:port: another port is not allowed.
    assert rules.problem("http://127.0.0.1:8081/hook") is not None


def test_allowed_hosts_parse_and_refuse_malformed_entries() -> None:
    assert parse_allowed_hosts(["127.0.0.1", " Tools.Internal:8443 ", "", "[::1]:9000"]) == (
        AllowedHost("127.0.0.1"),
        AllowedHost("tools.internal", 8443),
        AllowedHost("::1", 9000),
    )
    for bad in ("http://x", "host:notaport", "a b", "host/path", "user@host"):
        with pytest.raises(ValueError):
            parse_allowed_hosts([bad])


def test_the_check_resolves_again_each_time() -> None:
    resolver = FakeResolver({"flip.example": ["93.184.216.34"]})
    rules = UrlPolicy(resolve=resolver)
    assert rules.problem("https://flip.example/x") is None
    resolver.table["flip.example"] = ["127.0.0.1"]  # DNS rebinding
    assert "not allowed" in (rules.problem("https://flip.example/x") or "")
    assert resolver.lookups == ["flip.example", "flip.example"]
