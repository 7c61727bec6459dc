"""Ctrl-C: a real SIGINT to a real process stops a long generation within about one token,
and the model stays usable. A main-thread call runs on the main thread with a watcher on the
interpreter's wakeup fd (pyshim/_sigint.py), which passes every signal on to the wakeup fd set
before it; a stream, or a program with a SIGINT handler of its own, runs the call on a worker
thread and the main thread cancels it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from conftest import ROOT, SMOL

MODES = ("generate", "on_delta", "stream", "wakeup_fd", "own_handler")
CHILD = f"MODES = {MODES!r}\n" + textwrap.dedent(
    """
    import os, signal, sys, time
    import pyshim
    # Python's own SIGINT handler, whatever this process inherited: a shell that starts a job in
    # the background without job control (CI scripts) makes it start with SIGINT ignored
    signal.signal(signal.SIGINT, signal.default_int_handler)
    m = pyshim.Model(sys.argv[1], n_ctx=8192, temperature=0)
    long = dict(max_tokens=6000, ignore_eos=True)
    ask = [{"role": "user", "content": "Tell me a very long story."}]
    def own_handler(signum, frame):
        raise KeyboardInterrupt
    for mode in MODES:
        if mode == "wakeup_fd":  # a wakeup fd of the program's own (asyncio sets one)
            mine_r, mine_w = os.pipe()
            os.set_blocking(mine_w, False)
            signal.set_wakeup_fd(mine_w)
        if mode == "own_handler":
            signal.signal(signal.SIGINT, own_handler)
        print("go", mode, flush=True)
        try:
            if mode in ("generate", "wakeup_fd", "own_handler"):
                m.generate(ask, **long)
            elif mode == "on_delta":
                m.generate(ask, on_delta=lambda d: None, **long)
            else:
                for _ in m.stream(ask, **long):
                    pass
            print("finished without interruption", flush=True)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
        if mode == "wakeup_fd":  # it got the signal too, and is the wakeup fd again
            assert signal.SIGINT in os.read(mine_r, 64), "the signal did not reach the program's wakeup fd"
            assert signal.set_wakeup_fd(-1) == mine_w, "the program's wakeup fd was not put back"
        r = m.generate([{"role": "user", "content": "Say OK."}], max_tokens=4)
        print("usable", r["n_decoded"], flush=True)
    """
)

# Generous for a loaded 2-core machine; one token of smollm2 takes about 8 ms here.
MAX_DELAY_S = 3.0


def test_sigint_stops_a_long_generation_quickly_and_the_model_stays_usable() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, SMOL], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    delays = []
    try:
        assert child.stdout is not None
        for mode in MODES:
            assert child.stdout.readline().strip() == f"go {mode}"
            time.sleep(1.5)  # well into the generation (6000 tokens take most of a minute)
            sent = time.monotonic()
            os.kill(child.pid, signal.SIGINT)
            line = child.stdout.readline().strip()
            delays.append(time.monotonic() - sent)
            assert line == "interrupted", (mode, line, child.stderr.read() if child.poll() is not None else "")
            assert child.stdout.readline().split()[0] == "usable"
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    print("SIGINT to stop, per mode (s):", [round(d, 3) for d in delays])
    assert max(delays) < MAX_DELAY_S, delays


FORKED = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import pyshim
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with pyshim.Model(sys.argv[1], n_ctx=4096, temperature=0) as m:
        m.generate([{"role": "user", "content": "Say OK."}], max_tokens=2)  # the parent's watcher runs
    pid = os.fork()
    if pid == 0:
        child = pyshim.Model(sys.argv[1], n_ctx=4096, temperature=0)
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.monotonic()
        try:
            ask = [{"role": "user", "content": "Tell me a very long story."}]
            child.generate(ask, max_tokens=6000, ignore_eos=True)
            os._exit(1)
        except KeyboardInterrupt:
            os._exit(0 if time.monotonic() - t0 < 1.0 + MAX_DELAY_S else 2)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    """
)


def test_sigint_stops_a_call_in_a_child_of_fork() -> None:
    # The parent's watcher thread is not in the child: the child's first watched call starts
    # its own (pyshim/_sigint.py), or Ctrl-C there would wait for the whole generation.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    script = f"MAX_DELAY_S = {MAX_DELAY_S}\n" + FORKED
    out = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", script, SMOL], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.stdout.strip().splitlines()[-1:] == ["child 0"], out.stdout + out.stderr
