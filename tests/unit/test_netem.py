"""The tc helper's pure parts: link parsing/validation, tc argument lists, plans, target discovery."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "services"))

from netem import tc  # noqa: E402
from netem.cluster import Shaper, Target, assign_slots, desired_peers, target_from_attrs, targets_from_attrs  # noqa: E402
from netem.links import Link, LinkError, Shape, parse_link, parse_links  # noqa: E402
from netem.targets import link_between, pair_links  # noqa: E402


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


def attrs(cid, service, pid, ips, running=True, number=None):
    labels = {"com.docker.compose.service": service}
    if number is not None:
        labels["com.docker.compose.container-number"] = str(number)
    return {"Id": cid, "Config": {"Labels": labels}, "State": {"Running": running, "Pid": pid},
            "NetworkSettings": {"Networks": {net: {"IPAddress": ip} for net, ip in ips.items()}}}


def test_targets_from_inspect_data():
    """Running compose containers become targets named <service>-<number>; stopped ones are ignored."""
    targets = targets_from_attrs([attrs("b", "worker0", 11, {"n": "172.18.0.3"}, number=1),
                                  attrs("a", "master", 10, {"n": "172.18.0.2"}, number=1),
                                  attrs("c", "worker1", 12, {"n": "172.18.0.4"}, running=False, number=1)])
    assert sorted(targets) == ["master-1", "worker0-1"]
    assert targets["master-1"] == Target("master-1", "master", "a", 10, {"n": "172.18.0.2"})
    assert target_from_attrs({"Id": "x", "Config": {"Labels": {}}, "State": {"Running": True, "Pid": 3}}) is None


def test_every_replica_of_a_scaled_service_is_a_target():
    """worker scaled to 3 (one stopped) gives worker-1 and worker-3 by their number labels; containers without a
    label (or repeating a number) take their service's lowest free number in id order."""
    targets = targets_from_attrs([attrs("c3", "worker", 13, {"n": "10.0.0.13"}, number=3),
                                  attrs("c1", "worker", 11, {"n": "10.0.0.11"}, number=1),
                                  attrs("c2", "worker", 12, {"n": "10.0.0.12"}, number=2, running=False),
                                  attrs("m", "master", 10, {"n": "10.0.0.10"}, number=1)])
    assert sorted(targets) == ["master-1", "worker-1", "worker-3"]
    assert targets["worker-3"] == Target("worker-3", "worker", "c3", 13, {"n": "10.0.0.13"})
    plain = targets_from_attrs([attrs("y", "recv", 2, {"n": "10.0.0.3"}), attrs("x", "recv", 1, {"n": "10.0.0.2"}),
                                attrs("z", "recv", 3, {"n": "10.0.0.4"}, number=1)])
    assert {name: t.container_id for name, t in plain.items()} == {"recv-1": "z", "recv-2": "x", "recv-3": "y"}


def workers(n, first=1, master=True):
    """Targets master-1 and worker-<first..first+n-1> on one network, worker-i at 10.0.0.1<i>."""
    targets = {"worker-%d" % i: Target("worker-%d" % i, "worker", "w%d" % i, 100 + i, {"n": "10.0.0.1%d" % i})
               for i in range(first, first + n)}
    if master:
        targets["master-1"] = Target("master-1", "master", "m", 10, {"n": "10.0.0.2"})
    return targets


def test_service_links_expand_to_every_replica_but_never_to_itself():
    """master>worker reaches each worker; worker>worker each *other* worker; worker>master every worker's
    return path; a container never gets a link to itself."""
    links = parse_links(["master>worker,rate=3", "worker>worker,rate=2", "worker>master,rate=8"])
    pairs = {pair: link.shape.rate for pair, link in pair_links(links, workers(3)).items()}
    assert pairs == {
        ("master-1", "worker-1"): 3, ("master-1", "worker-2"): 3, ("master-1", "worker-3"): 3,
        ("worker-1", "worker-2"): 2, ("worker-1", "worker-3"): 2, ("worker-2", "worker-1"): 2,
        ("worker-2", "worker-3"): 2, ("worker-3", "worker-1"): 2, ("worker-3", "worker-2"): 2,
        ("worker-1", "master-1"): 8, ("worker-2", "master-1"): 8, ("worker-3", "master-1"): 8}
    assert parse_links(["worker<>worker,rate=1"]) == [Link("worker", "worker", Shape(rate=1))]


def test_a_link_naming_a_replica_wins_over_the_service_link():
    """worker-2>master overrides worker>master for worker-2 only (in either spec order); master>worker-3 overrides
    master>worker for worker-3; naming both replicas beats naming one; a named source beats a named destination."""
    targets = workers(3)
    links = parse_links(["worker-2>master,rate=1", "worker>master,rate=8", "master>worker,rate=3",
                         "master>worker-3,rate=5", "worker-1>worker-3,rate=7", "worker>worker-3,rate=6",
                         "worker-2>worker,rate=4"])
    rate = {pair: link.shape.rate for pair, link in pair_links(links, targets).items()}
    assert rate[("worker-2", "master-1")] == 1 and rate[("worker-1", "master-1")] == 8
    assert rate[("master-1", "worker-3")] == 5 and rate[("master-1", "worker-1")] == 3
    assert rate[("worker-1", "worker-3")] == 7  # both named beats worker>worker-3
    assert rate[("worker-2", "worker-3")] == 4  # worker-2>worker (named source) beats worker>worker-3
    assert ("worker-1", "worker-2") not in rate  # no link names that pair
    assert link_between(links, targets["worker-3"], targets["worker-3"]) is None


def test_desired_peers_use_the_shared_network():
    """A peer's IP is taken from a network both containers are on; a peer on no shared network is skipped."""
    targets = {"m-1": Target("m-1", "m", "1", 10, {"front": "10.1.0.2", "back": "10.2.0.2"}),
               "w-1": Target("w-1", "w", "2", 11, {"back": "10.2.0.3"}),
               "x-1": Target("x-1", "x", "3", 12, {"elsewhere": "10.3.0.3"})}
    links = parse_links(["m>w,rate=3", "m>x,rate=1", "m>gone,rate=1"])
    peers, own = desired_peers(targets["m-1"], pair_links(links, targets), targets)
    assert own == "10.2.0.2" and peers == {"w-1": ("10.2.0.3", Shape(rate=3))}


def test_peer_slots_are_stable_and_reuse_the_lowest_free_index():
    """Kept peers keep their index whatever sorts before them; a gone peer's index is the next one reused;
    indices never exceed the number of peers at once, and stop at tc's limit."""
    slots = assign_slots({}, ["worker-2", "worker-3"])
    assert slots == {"worker-2": 0, "worker-3": 1}
    slots = assign_slots(slots, ["worker-1", "worker-2", "worker-3"])  # sorts first, keeps nobody's index
    assert slots == {"worker-1": 2, "worker-2": 0, "worker-3": 1}
    slots = assign_slots(slots, ["worker-1", "worker-3"])
    assert slots == {"worker-1": 2, "worker-3": 1}
    assert assign_slots(slots, ["worker-1", "worker-3", "worker-9"])["worker-9"] == 0
    many = assign_slots({}, ["p%05d" % i for i in range(tc.MAX_PEERS + 5)])
    assert len(many) == tc.MAX_PEERS and max(many.values()) == tc.MAX_PEERS - 1


class FakeRunner:
    """Records commands; answers `ip addr` with one eth0 holding the container's address (by pid, else `ip`)."""

    def __init__(self, ip, by_pid=None):
        self.ip, self.by_pid, self.calls = ip, by_pid or {}, []

    def __call__(self, argv, may_fail=False):
        self.calls.append((argv, may_fail))
        if argv[-3:] == ["-4", "addr", "show"]:
            return "7: eth0@if8    inet %s/16 scope global eth0\n" % self.by_pid.get(int(argv[2]), self.ip)
        return ""


def test_shaper_applies_then_updates_in_place_then_starts_afresh_on_restart():
    """First sync builds all rules; a second sync changes nothing; a new pid (restart) rebuilds."""
    links = parse_links(["m>w,rate=3"])
    targets = {"m-1": Target("m-1", "m", "1", 10, {"n": "10.2.0.2"}),
               "w-1": Target("w-1", "w", "2", 11, {"n": "10.2.0.3"})}
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
    targets["m-1"] = Target("m-1", "m", "1", 99, {"n": "10.2.0.2"})
    shaper.sync(targets)
    assert [a[5:] for a, _ in run.calls if a[5] == "tc"][0] == tc.delete_root("eth0")
    run.calls.clear()
    shaper.clear()
    assert run.calls == [(tc.in_netns(99, tc.delete_root("eth0")), True)]


def test_shaper_touches_only_link_sources():
    """Containers that are no link's source get no commands at all."""
    links = parse_links(["m>w,rate=3"])
    targets = {"m-1": Target("m-1", "m", "1", 10, {"n": "10.2.0.2"}),
               "w-1": Target("w-1", "w", "2", 11, {"n": "10.2.0.3"}),
               "other-1": Target("other-1", "other", "3", 12, {"n": "10.2.0.4"})}
    run = FakeRunner("10.2.0.2")
    Shaper(links, run=run, netem=True).sync(targets)
    assert {a[2] for a, _ in run.calls} == {"10"}


def pool_shaper():
    """A Shaper for master<>worker and worker<>worker, with a runner that knows every container's address."""
    by_pid = {t.pid: t.ips["n"] for t in workers(4).values()}
    run = FakeRunner("?", by_pid)
    links = parse_links(["master>worker,rate=3", "worker>worker,rate=3", "worker>master,rate=8"])
    return Shaper(links, run=run, netem=False), run


def tc_by_pid(run):
    """{pid: [tc argv inside that container]} of the recorded commands."""
    found = {}
    for argv, _ in run.calls:
        if argv[5] == "tc":
            found.setdefault(int(argv[2]), []).append(argv[5:])
    return found


def test_scale_2_3_2_changes_only_the_changed_peer_in_place(caplog):
    """worker 2 -> 3: worker-3 gets fresh rules to its 3 peers, every other source just gains a class + filter for
    worker-3's IP at a new index (the existing peers keep theirs). 3 -> 2 (worker-1 gone): the others delete only
    worker-1's filter + class; worker-2's index toward worker-3 and the master is unchanged."""
    shaper, run = pool_shaper()
    shaper.sync(workers(2, first=2))  # worker-2, worker-3 and the master
    slots_before = {name: dict(state.slots) for name, state in shaper.applied.items()}
    assert slots_before["master-1"] == {"worker-2": 0, "worker-3": 1}
    run.calls.clear()
    caplog.set_level("INFO", logger="netem")
    shaper.sync(workers(3))  # worker-1 appears: sorts before the others
    assert "worker-1 appeared: shaping it and its 3 peers" in caplog.text
    cmds = tc_by_pid(run)
    fresh = cmds.pop(101)
    assert fresh[:2] == [tc.delete_root("eth0"), tc.root_qdisc("eth0")] and sum(c[1] == "filter" for c in fresh) == 3
    assert cmds[10] == [tc.peer_class("eth0", 2, Shape(rate=3)), tc.peer_filter("eth0", 2, "10.0.0.11")]
    assert cmds[102] == [tc.peer_class("eth0", 2, Shape(rate=3)), tc.peer_filter("eth0", 2, "10.0.0.11")]
    assert cmds[103] == [tc.peer_class("eth0", 2, Shape(rate=3)), tc.peer_filter("eth0", 2, "10.0.0.11")]
    for name, slots in slots_before.items():
        assert {k: v for k, v in shaper.applied[name].slots.items() if k != "worker-1"} == slots
    assert "master-1 (eth0): worker-1 10.0.0.11 3 MB/s; worker-2 10.0.0.12 3 MB/s; worker-3 10.0.0.13 3 MB/s" \
        in caplog.text
    run.calls.clear()
    shaper.sync(workers(2, first=2))  # worker-1 goes away again
    assert "worker-1 went away: removing the rules toward it from 3 peers" in caplog.text
    cmds = tc_by_pid(run)
    assert sorted(cmds) == [10, 102, 103]  # nothing runs in the gone container
    for pid in (10, 102, 103):
        assert cmds[pid] == [tc.delete_filter("eth0", 2), tc.delete_class("eth0", 2)]
    assert "worker-1" not in shaper.applied
    assert shaper.applied["worker-2"].slots == slots_before["worker-2"]


def test_a_peer_gone_frees_its_index_and_a_lone_replica_loses_its_rules():
    """worker-2 leaving frees index 0 on worker-1; the next newcomer takes it (class replace + filter add, no
    renumbering of the master's index). When a source has no peer left its classes are deleted, not left behind
    toward a dead IP; clear() then removes the root in every container it shaped."""
    shaper, run = pool_shaper()
    shaper.sync(workers(2, master=False))  # worker-1 <-> worker-2 only
    assert shaper.applied["worker-1"].slots == {"worker-2": 0}
    run.calls.clear()
    shaper.sync(workers(1, master=False))
    assert tc_by_pid(run) == {101: [tc.delete_filter("eth0", 0), tc.delete_class("eth0", 0)]}
    assert shaper.applied["worker-1"].slots == {} and shaper.applied["worker-1"].peers == {}
    run.calls.clear()
    shaper.sync(dict(workers(1, first=3, master=False), **workers(1)))  # worker-3 and the master arrive
    assert shaper.applied["worker-1"].slots == {"master-1": 0, "worker-3": 1}
    run.calls.clear()
    shaper.clear()
    assert sorted(int(a[2]) for a, _ in run.calls) == [10, 101, 103]
    assert all(a[5:] == tc.delete_root("eth0") for a, _ in run.calls)


def test_a_restarted_replica_starts_afresh_and_its_peers_follow_its_new_ip():
    """worker-2 restarted (new pid, new IP): its own rules are rebuilt from scratch (root deleted first, indices
    compacted); the other sources only swap the filter for worker-2's index to the new IP."""
    shaper, run = pool_shaper()
    targets = workers(3)
    shaper.sync(targets)
    master_slots = dict(shaper.applied["master-1"].slots)
    run.calls.clear()
    targets["worker-2"] = Target("worker-2", "worker", "w2", 202, {"n": "10.0.0.22"})
    run.by_pid[202] = "10.0.0.22"
    shaper.sync(targets)
    cmds = tc_by_pid(run)
    assert cmds.pop(202)[0] == tc.delete_root("eth0")
    index = master_slots["worker-2"]
    for pid in (10, 101, 103):
        slot = shaper.applied[{10: "master-1", 101: "worker-1", 103: "worker-3"}[pid]].slots["worker-2"]
        assert cmds[pid] == [tc.delete_filter("eth0", slot), tc.peer_filter("eth0", slot, "10.0.0.22")]
    assert shaper.applied["master-1"].slots == master_slots and master_slots["worker-2"] == index
