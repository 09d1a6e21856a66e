"""`cnnvideo local`'s run summary says what ran: the plan most frames used, every plan in order with its frames,
and the CPU caps (or why the roles ran uncapped)."""
from cnnvideo.tools import launcher


def test_summary_names_each_plan_and_the_caps():
    """A das run that moved from everything on worker 0 to a split: both plans, in order, and the cgroup caps."""
    report = {"plan": [["a"] * 42, ["b"] * 194], "plans_used": [{"cuts": [0, 40, 40], "frames": 13},
                                                                {"cuts": [0, 27, 40], "frames": 47}],
              "cpu_caps": {"method": "cgroup-v1", "shares": {"w0": 0.25, "w1": 0.25}, "note": ""}}
    lines = launcher._summary(report).splitlines()
    assert "plan (layers/worker)   42 | 194" in lines
    assert "plans used (cuts)      [0, 40, 40] 13 frames, [0, 27, 40] 47 frames" in lines
    assert "cpu caps               cgroup-v1: w0 0.25, w1 0.25" in lines


def test_summary_says_why_caps_were_not_applied():
    """best-effort without a writable cgroup: the caps line carries the note; no plans: a dash."""
    note = "local.cpus: best-effort: no cgroup writable here (x), roles ran uncapped"
    lines = launcher._summary({"cpu_caps": {"method": "none", "shares": {}, "note": note}}).splitlines()
    assert "cpu caps               none (%s)" % note in lines and "plans used (cuts)      -" in lines
