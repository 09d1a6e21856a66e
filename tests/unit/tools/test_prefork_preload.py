"""The prefork server's preloaded modules import no module that must not be shared across a fork (gRPC's threads
and sockets): checked in a fresh interpreter, in a second, before the slow integration test that starts the server."""
import json
import os
import subprocess
import sys

from cnnvideo.tools import prefork


def test_the_preloaded_modules_do_not_import_grpc():
    """Importing every PRELOAD module (those installed) leaves NOT_BEFORE_FORK out of sys.modules; `cnnvideo.config`
    reached grpc through rpc.tls once, and every `cnnvideo local` run then fell back to plain processes."""
    code = ("import importlib, json, sys\n"
            "for name in %r:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except ImportError:\n"
            "        pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in %r)))\n"
            % (prefork.PRELOAD + prefork.ONNX_PRELOAD, prefork.NOT_BEFORE_FORK))
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, check=True, universal_newlines=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_onnx_is_preloaded_only_for_a_run_that_may_use_onnx_runtime():
    """A run whose every camera resolved to torch preloads no onnx (no torch role imports it); ONNX Runtime, auto or
    an engine not resolved yet keep it."""
    assert not prefork.onnx_wanted(["torch", "torch"])
    assert prefork.onnx_wanted(["torch", "onnxruntime"]) and prefork.onnx_wanted(["auto"])
    assert prefork.onnx_wanted([None])


def test_the_server_builds_the_runs_model_on_one_thread():
    """The server's model argument (the launcher passes the run's torch model) builds it before any fork and keeps it
    for the roles (zoo.prebuild), leaving the process on one thread under the launcher's OMP_NUM_THREADS=1 (serve()
    refuses to fork from more); a model it cannot build is left to the role, which says why."""
    code = ("import os\n"
            "from cnnvideo.tools import prefork\n"
            "from cnnvideo.model import zoo\n"
            "prefork._prebuild(prefork.model_arg('mobilenet_v2', 'random', 0))\n"
            "prefork._prebuild(prefork.model_arg('no_such_model', 'random', 0))\n"
            "print(sorted(zoo._PREBUILT), len(os.listdir('/proc/self/task')))\n")
    out = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, check=True, universal_newlines=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"))
    assert out.stdout.strip().splitlines()[-1] == "[('mobilenet_v2', 'random', 0)] 1"
