#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Run the end-to-end tests: every test_* function of every t_*.py module in
this directory, against one suite of real daemons per module (a module may
declare SUITE_CONF for extra config). Prints one line per test and ends with
'e2e: N passed, N failed' (and '(N skipped)' when a test raised rwtest.Skip:
it cannot run on this host; tests/run-all reruns those it can elsewhere).
Exit status 1 on any failure."""
import importlib.util
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rwtest  # noqa: E402

here = os.path.dirname(os.path.abspath(__file__))
only = sys.argv[1:]
passed = failed = skipped = 0
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
            try:
                t()
                print(f"PASS {fn}:{name}", flush=True)
                passed += 1
            except rwtest.Skip as e:
                print(f"SKIP {fn}:{name}: {e}", flush=True)
                skipped += 1
            except Exception:
                print(f"FAIL {fn}:{name}", flush=True)
                traceback.print_exc()
                failed += 1
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
        t0 = time.time()
        try:
            t(suite)
            print(f"PASS {fn}:{name} ({time.time() - t0:.2f}s)", flush=True)
            passed += 1
        except rwtest.Skip as e:
            print(f"SKIP {fn}:{name}: {e}", flush=True)
            skipped += 1
        except Exception:
            print(f"FAIL {fn}:{name} ({time.time() - t0:.2f}s)", flush=True)
            traceback.print_exc()
            failed += 1
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
