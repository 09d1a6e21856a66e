"""`cnnvideo local` restarts a master killed by a signal, but never once it was asked to stop: a CI run under load
saw the master die at the launcher's own SIGTERM, be started again, and run on with nobody left to stop it. Real
processes: a stand-in master that kills itself with SIGTERM."""
import sys

from cnnvideo.config_types import Reliability
from cnnvideo.tools import launcher, local_cameras

SELF_KILL = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"]


def test_the_rule():
    """Killed by a signal: restarted while restarts are left and nobody asked to stop; an error exit never is."""
    rel = Reliability(restart=True, max_restarts=2)
    assert local_cameras.restarts_master(-15, rel, 0, stopping=False)
    assert not local_cameras.restarts_master(-15, rel, 0, stopping=True)
    assert not local_cameras.restarts_master(-15, rel, 2, stopping=False)
    assert not local_cameras.restarts_master(3, rel, 0, stopping=False)
    assert not local_cameras.restarts_master(-9, Reliability(restart=False), 0, stopping=False)


def test_a_master_killed_while_stopping_is_not_started_again(tmp_path):
    """With a stop asked for, the first death is the end (code -15, no restart); without one the same master is
    started again until its restarts run out."""
    rel = Reliability(restart=True, max_restarts=2)
    stopped = launcher.Child("master", SELF_KILL, {}, str(tmp_path / "a.log"))
    assert launcher._wait_master(stopped, [], rel=rel, stopping=lambda: True) == -15
    assert stopped.restarts == 0
    crashing = launcher.Child("master", SELF_KILL, {}, str(tmp_path / "b.log"))
    assert launcher._wait_master(crashing, [], rel=rel, stopping=lambda: False) == -15
    assert crashing.restarts == 2


def test_wait_masters_of_several_cameras_follows_the_same_rule(tmp_path):
    """The cameras' wait (local_cameras.wait_masters): the same stand-in, stopping: no restart."""
    rel = Reliability(restart=True, max_restarts=2)
    master = launcher.Child("master-door", SELF_KILL, {}, str(tmp_path / "c.log"))
    codes = local_cameras.wait_masters([master], [], rel, launcher._supervise, stopping=lambda: True)
    assert codes == {"master-door": -15} and master.restarts == 0
