#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Run the end-to-end tests: every test_* function of every t_*.py module in
this directory, against one suite of real daemons per module (a module may
declare SUITE_CONF for extra config). Prints one line per test and ends with
'e2e: N passed, N failed' (and '(N skipped)' when a test raised rwtest.Skip:
it cannot run on this host; tests/run-all reruns those it can elsewhere).
Exit status 1 on any failure.

A test that runs longer than RW_E2E_TEST_TIMEOUT seconds (default 900) fails
with the Python stacks of all threads printed, and the run goes on with the
next test: one hung test costs minutes, not the CI job. SIGUSR1 prints the
stacks of a running test at any time (tests/vm/run-e2e sends it when its VM
seems stuck)."""
import faulthandler
import importlib.util
import os
import signal
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rwtest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
only = sys.argv[1:]
passed = failed = skipped = 0
TEST_TIMEOUT = int(os.environ.get("RW_E2E_TEST_TIMEOUT", "900"))
faulthandler.enable()
faulthandler.register(signal.SIGUSR1, all_threads=True)


class TestTimeout(Exception):
    pass


def on_alarm(_sig, _frame):
    faulthandler.dump_traceback(all_threads=True)
    raise TestTimeout(f"the test ran longer than {TEST_TIMEOUT} s (RW_E2E_TEST_TIMEOUT)")


signal.signal(signal.SIGALRM, on_alarm)


def run_test(label, t, *args):
    """Run one test; print its PASS/SKIP/FAIL line and count it."""
    global passed, failed, skipped
    t0 = time.time()
    signal.alarm(TEST_TIMEOUT)
    try:
        t(*args)
        signal.alarm(0)
        print(f"PASS {label} ({time.time() - t0:.2f}s)", flush=True)
        passed += 1
    except rwtest.Skip as e:
        signal.alarm(0)
        print(f"SKIP {label}: {e}", flush=True)
        skipped += 1
    except Exception:
        signal.alarm(0)
        print(f"FAIL {label} ({time.time() - t0:.2f}s)", flush=True)
        traceback.print_exc()
        failed += 1

for fn in sorted(os.listdir(here)):
    if not (fn.startswith("t_") and fn.endswith(".py")):
        continue
    spec = importlib.util.spec_from_file_location(fn[:-3], os.path.join(here, fn))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    tests = [(n, getattr(mod, n)) for n in sorted(dir(mod)) if n.startswith("test_")]
    tests.sort(key=lambda t: t[1].__code__.co_firstlineno)
    if only:
        tests = [t for t in tests if any(o in f"{fn}:{t[0]}" for o in only)]
    if not tests:
        continue
    if getattr(mod, "NO_SUITE", False):  # tests that run the binaries themselves
        for name, t in tests:
            run_test(f"{fn}:{name}", t)
        continue
    suite = rwtest.Suite(getattr(mod, "SUITE_CONF", ""), getattr(mod, "WRAP", None))
    try:
        suite.start()
    except Exception as e:  # the whole module fails
        print(f"FAIL {fn}: suite did not start: {e}")
        failed += len(tests)
        suite.stop()
        suite.cleanup()
        continue
    for name, t in tests:
        run_test(f"{fn}:{name}", t, suite)
    problems = suite.stop()
    if problems:
        print(f"FAIL {fn}:teardown hygiene")
        for p in problems:
            print("   ", p)
        failed += 1
        for d in rwtest.DAEMONS:
            print(f"--- {d} log (tail) ---")
            print("\n".join(suite.log(d).splitlines()[-30:]))
    else:
        print(f"PASS {fn}:teardown hygiene")
        passed += 1
    suite.cleanup()
print(f"e2e: {passed} passed, {failed} failed" + (f" ({skipped} skipped)" if skipped else ""))
sys.exit(1 if failed else 0)
