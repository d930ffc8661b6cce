"""PyTorch's own distributed test suite (torch.testing._internal.distributed.distributed_test, shipped with PyTorch)
on gloo, or on mpcomm wherever it drives gloo.

The suite gates its tests on the backend's name, so it runs with BACKEND=gloo either way; with --mpcomm, every
process group it asks gloo for (init_process_group, new_group) is made on mpcomm instead. Prints one line per test
("PASS name", "FAIL name: first line of the error", "SKIP name") and a summary.

    python tests/torch/dist_suite.py [--mpcomm] [--world-size N] [-k PATTERN]
"""

import os
import sys
import tempfile

AS_MPCOMM = os.environ.get("MPCOMM_DIST_SUITE") == "mpcomm"
os.environ.setdefault("BACKEND", "gloo")
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="mpcomm-dist-suite-"))
os.environ.setdefault("PYTORCH_PRINT_REPRO_ON_FAILURE", "0")  # the error's last line is the error

import torch.distributed as dist  # noqa: E402

if AS_MPCOMM:
    import mpcomm.torch  # noqa: F401,E402  (registers the backend)

    _init, _new_group = dist.init_process_group, dist.new_group

    def _mine(backend):
        return "mpcomm" if backend in (None, "gloo", dist.Backend.GLOO) else backend

    def init_process_group(*args, **kwargs):
        if args:
            args = (_mine(args[0]),) + args[1:]
        else:
            kwargs["backend"] = _mine(kwargs.get("backend"))
        return _init(*args, **kwargs)

    def new_group(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = _mine(kwargs["backend"])
        elif len(args) > 2:
            args = args[:2] + (_mine(args[2]),) + args[3:]
        return _new_group(*args, **kwargs)

    # Spawned ranks import this file as their main module, so they patch too.
    dist.init_process_group, dist.new_group = init_process_group, new_group

from torch.testing._internal.distributed.distributed_test import DistributedTest, TestDistBackend  # noqa: E402


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


def main():
    import argparse
    import unittest

    ap = argparse.ArgumentParser()
    ap.add_argument("--mpcomm", action="store_true")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("-k", dest="pattern", help="only tests whose name holds this")
    a = ap.parse_args()
    if a.mpcomm != AS_MPCOMM or str(a.world_size) != os.environ["WORLD_SIZE"]:
        # The spawned ranks read the choice from the environment: restart with it set.
        env = dict(os.environ, MPCOMM_DIST_SUITE="mpcomm" if a.mpcomm else "gloo", WORLD_SIZE=str(a.world_size))
        os.execvpe(sys.executable, [sys.executable] + sys.argv, env)
    loader = unittest.TestLoader()
    names = [n for n in loader.getTestCaseNames(TestDistBackendWithSpawn) if not a.pattern or a.pattern in n]
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for name in names:
        result = unittest.TestResult()
        TestDistBackendWithSpawn(name).run(result)
        if result.skipped:
            verdict, why = "SKIP", result.skipped[0][1]
        elif result.errors or result.failures:
            verdict = "FAIL"
            text = (result.errors or result.failures)[0][1].strip().splitlines()
            why = next((l for l in reversed(text) if l.strip()), "")[:200]
        else:
            verdict, why = "PASS", ""
        counts[verdict] += 1
        print(f"{verdict} {name}" + (f": {why}" if verdict == "FAIL" else ""), flush=True)
    backend = "mpcomm" if a.mpcomm else "gloo"
    print(f"{backend}: {len(names)} tests, {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped",
          flush=True)


if __name__ == "__main__":
    main()
