"""The tc helper's pure parts: link parsing/validation, tc argument lists, plans, target discovery."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "services"))

from netem import tc  # noqa: E402
from netem.cluster import Shaper, Target, desired_peers, target_from_attrs, targets_from_attrs  # noqa: E402
from netem.links import Link, LinkError, Shape, parse_link, parse_links  # noqa: E402


def test_parse_one_direction_with_all_settings():
    """A full spec becomes one link with every value converted to a float."""
    (link,) = parse_link("master>worker0,rate=3,delay=20ms,jitter=2,loss=0.5%")
    assert link == Link("master", "worker0", Shape(rate=3.0, delay=20.0, jitter=2.0, loss=0.5))


def test_parse_both_directions_and_later_spec_wins():
    """'<>' gives two links; a later spec for the same pair replaces the earlier one."""
    links = parse_links(["a<>b,rate=1", "b>a,rate=8;c>a,rate=2MB/s"])
    pairs = {(link.src, link.dst): link.shape.rate for link in links}
    assert pairs == {("a", "b"): 1.0, ("b", "a"): 8.0, ("c", "a"): 2.0}


@pytest.mark.parametrize("spec, words", [
    ("a-b,rate=1", "SRC>DST"),
    ("a>b", "needs rate"),
    ("a>b,rate=0", "rate must be in"),
    ("a>b,rate=nan", "rate must be"),
    ("a>b,rate=1,delay=-1", "delay must be in"),
    ("a>b,rate=1,loss=101", "loss must be in"),
    ("a>b,rate=1,speed=3", "unknown setting"),
    ("a>b,rate=1,rate=2", "given twice"),
    ("a>b,rate=3ms", "rate must be a number"),
    ("a>a,rate=1", "the same"),
    ("a$(rm)>b,rate=1", "bad container"),
    ("a>b c,rate=1", "bad container"),
])
def test_bad_specs_are_rejected_with_the_reason(spec, words):
    """Every malformed or out-of-range value raises LinkError naming the problem."""
    with pytest.raises(LinkError, match=words):
        parse_links([spec])


def test_shape_validates_types():
    """Shape refuses non-numbers and booleans even when built directly."""
    with pytest.raises(LinkError):
        Shape(rate="3")
    with pytest.raises(LinkError):
        Shape(rate=True)


def test_class_rate_is_bits_per_second_of_megabytes():
    """3 MB/s = 24,000,000 bit/s; burst and quantum are explicit."""
    argv = tc.peer_class("eth0", 0, Shape(rate=3))
    assert argv == ["tc", "class", "replace", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb",
                    "rate", "24000000bit", "ceil", "24000000bit", "burst", "3028b", "cburst", "3028b",
                    "quantum", "60000"]


def test_netem_leaf_always_states_delay_and_loss():
    """netem lists delay and loss (so replace resets them) and jitter only when set."""
    assert tc.peer_netem("eth0", 1, Shape(rate=1, delay=50)) == [
        "tc", "qdisc", "replace", "dev", "eth0", "parent", "1:11", "handle", "11:", "netem",
        "limit", "10000", "delay", "50ms", "loss", "0%"]
    assert tc.peer_netem("eth0", 0, Shape(rate=1, delay=20, jitter=2.5, loss=1))[-4:] == [
        "20ms", "2.5ms", "loss", "1%"]


def test_filter_matches_peer_ip_with_fixed_handle():
    """The u32 filter matches the destination /32 and names its class."""
    argv = tc.peer_filter("eth0", 2, "172.18.0.4")
    assert argv[argv.index("handle") + 1] == "800::12"
    assert argv[-7:] == ["u32", "match", "ip", "dst", "172.18.0.4/32", "flowid", "1:12"]


@pytest.mark.parametrize("bad", ["eth0;reboot", "", "x" * 16, "eth 0"])
def test_bad_device_names_are_refused(bad):
    """Interface names are checked before they reach a command line."""
    with pytest.raises(LinkError):
        tc.root_qdisc(bad)


@pytest.mark.parametrize("bad", ["172.18.0.300", "10.0.0.1/8", "::1", "host"])
def test_bad_ips_are_refused(bad):
    with pytest.raises(LinkError):
        tc.peer_filter("eth0", 0, bad)


def test_fresh_plan_deletes_root_then_builds_everything():
    """Unknown state: delete root, add htb root, then class+netem+filter per peer in index order."""
    peers = {0: ("10.0.0.2", Shape(rate=3)), 1: ("10.0.0.3", Shape(rate=8, delay=5))}
    cmds = tc.plan("eth0", None, peers, netem=True)
    assert cmds[0] == tc.delete_root("eth0") and cmds[1] == tc.root_qdisc("eth0")
    assert [c[1] for c in cmds[2:]] == ["class", "qdisc", "filter", "class", "qdisc", "filter"]


def test_plan_without_netem_has_no_netem_leaf():
    cmds = tc.plan("eth0", None, {0: ("10.0.0.2", Shape(rate=3, delay=50))}, netem=False)
    assert not any("netem" in c for c in cmds)


def test_plan_changes_in_place():
    """Same state: nothing; new rate: class (+netem) replace only; new IP: filter del + add; gone: del both."""
    old = {0: ("10.0.0.2", Shape(rate=3)), 1: ("10.0.0.3", Shape(rate=3))}
    assert tc.plan("eth0", old, dict(old)) == []
    faster = {**old, 0: ("10.0.0.2", Shape(rate=8))}
    assert tc.plan("eth0", old, faster) == tc.peer_commands("eth0", 0, Shape(rate=8), True)
    moved = {**old, 1: ("10.0.0.9", Shape(rate=3))}
    assert tc.plan("eth0", old, moved) == [tc.delete_filter("eth0", 1), tc.peer_filter("eth0", 1, "10.0.0.9")]
    assert tc.plan("eth0", old, {0: old[0]}) == [tc.delete_filter("eth0", 1), tc.delete_class("eth0", 1)]


def test_one_segment_per_packet_is_checked_ip_link_argv():
    """GSO off for paced small messages: an `ip link set` argv on a validated device name."""
    assert tc.one_segment_per_packet("eth0") == ["ip", "link", "set", "dev", "eth0", "gso_max_size", "1500",
                                                 "gso_max_segs", "1"]
    with pytest.raises(LinkError):
        tc.one_segment_per_packet("eth0; reboot")


def test_in_netns_wraps_with_nsenter_and_checks_pid():
    assert tc.in_netns(42, ["tc", "qdisc"]) == ["nsenter", "-t", "42", "-n", "--", "tc", "qdisc"]
    for bad in (0, -1, "42", True):
        with pytest.raises(LinkError):
            tc.in_netns(bad, ["tc"])


def test_iface_for_ip_parses_ip_output():
    """Finds the interface (without its @peer suffix) that holds the address."""
    out = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
           "57: eth0@if58    inet 172.18.0.3/16 brd 172.18.255.255 scope global eth0\\       valid_lft forever\n"
           "59: eth1@if60    inet 172.19.0.2/16 brd 172.19.255.255 scope global eth1\\       valid_lft forever\n")
    assert tc.iface_for_ip(out, "172.19.0.2") == "eth1"
    assert tc.iface_for_ip(out, "172.18.0.3") == "eth0"
    assert tc.iface_for_ip(out, "10.0.0.1") is None


def attrs(cid, service, pid, ips, running=True):
    return {"Id": cid, "Config": {"Labels": {"com.docker.compose.service": service}},
            "State": {"Running": running, "Pid": pid},
            "NetworkSettings": {"Networks": {net: {"IPAddress": ip} for net, ip in ips.items()}}}


def test_targets_from_inspect_data():
    """Running compose containers become targets keyed by service; stopped ones are ignored."""
    targets = targets_from_attrs([attrs("b", "worker0", 11, {"n": "172.18.0.3"}),
                                  attrs("a", "master", 10, {"n": "172.18.0.2"}),
                                  attrs("c", "worker1", 12, {"n": "172.18.0.4"}, running=False)])
    assert sorted(targets) == ["master", "worker0"]
    assert targets["master"] == Target("master", "a", 10, {"n": "172.18.0.2"})
    assert target_from_attrs({"Id": "x", "Config": {"Labels": {}}, "State": {"Running": True, "Pid": 3}}) is None


def test_desired_peers_use_the_shared_network():
    """A peer's IP is taken from a network both containers are on; absent peers are skipped."""
    targets = {"m": Target("m", "1", 10, {"front": "10.1.0.2", "back": "10.2.0.2"}),
               "w": Target("w", "2", 11, {"back": "10.2.0.3"})}
    links = parse_links(["m>w,rate=3", "m>gone,rate=1"])
    peers, own = desired_peers(targets["m"], links, targets)
    assert own == "10.2.0.2" and peers == {1: ("10.2.0.3", Shape(rate=3))}  # index 0 is 'gone' (sorted)


class FakeRunner:
    """Records commands; answers `ip addr` with one eth0 holding the container's address."""

    def __init__(self, ip):
        self.ip, self.calls = ip, []

    def __call__(self, argv, may_fail=False):
        self.calls.append((argv, may_fail))
        if argv[-3:] == ["-4", "addr", "show"]:
            return "7: eth0@if8    inet %s/16 scope global eth0\n" % self.ip
        return ""


def test_shaper_applies_then_updates_in_place_then_starts_afresh_on_restart():
    """First sync builds all rules; a second sync changes nothing; a new pid (restart) rebuilds."""
    links = parse_links(["m>w,rate=3"])
    targets = {"m": Target("m", "1", 10, {"n": "10.2.0.2"}), "w": Target("w", "2", 11, {"n": "10.2.0.3"})}
    run = FakeRunner("10.2.0.2")
    shaper = Shaper(links, run=run, netem=False)
    shaper.sync(targets)
    tc_calls = [(a[5:], f) for a, f in run.calls if a[5] == "tc"]
    assert tc_calls[0] == (tc.delete_root("eth0"), True)  # may fail: nothing to delete yet
    assert all(a[:2] == ["nsenter", "-t"] and a[2] == "10" for a, _ in run.calls)
    assert (tc.in_netns(10, tc.one_segment_per_packet("eth0")), True) in run.calls  # once, failure tolerated
    run.calls.clear()
    shaper.sync(targets)
    assert [a for a, _ in run.calls if a[5] in ("tc", "ip") and "addr" not in a] == []
    targets["m"] = Target("m", "1", 99, {"n": "10.2.0.2"})
    shaper.sync(targets)
    assert [a[5:] for a, _ in run.calls if a[5] == "tc"][0] == tc.delete_root("eth0")
    run.calls.clear()
    shaper.clear()
    assert run.calls == [(tc.in_netns(99, tc.delete_root("eth0")), True)]


def test_shaper_touches_only_link_sources():
    """Containers that are no link's source get no commands at all."""
    links = parse_links(["m>w,rate=3"])
    targets = {"m": Target("m", "1", 10, {"n": "10.2.0.2"}), "w": Target("w", "2", 11, {"n": "10.2.0.3"}),
               "other": Target("other", "3", 12, {"n": "10.2.0.4"})}
    run = FakeRunner("10.2.0.2")
    Shaper(links, run=run, netem=True).sync(targets)
    assert {a[2] for a, _ in run.calls} == {"10"}
