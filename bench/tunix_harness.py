"""What the Tunix comparisons share (bench/compare_tunix.py for W1, bench/compare_tunix_real.py for R1):
the Tunix virtual environment, running one side of a comparison in a subprocess, and reading its
result. Runs in the project's venv; imports nothing beyond the standard library.

  ensure_venv(args)   creates (or reuses) bench/.tunix-venv from the pinned
                      bench/requirements-tunix.txt. A hash stamp inside the venv records what was
                      installed; the venv is rebuilt only when the requirements file (or the base
                      interpreter) changes. pip's output is shown as it installs. args has
                      .skip_install and .python (the --skip-install / --python options).
  run_and_parse(label, cmd, timeout)
                      runs one side (stdout echoed with a [label] prefix, stderr passed through),
                      returns the last JSON object on its stdout that has the required key, with
                      "peak_rss_bytes" added: the subprocess's peak resident memory (ru_maxrss of
                      wait4 on it, the kernel's high-water mark of the process).
  our_python()        the project venv's interpreter.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
VENV = BENCH / ".tunix-venv"
REQUIREMENTS = BENCH / "requirements-tunix.txt"
STAMP_NAME = ".requirements-stamp.json"
# Interpreter versions the pinned set is known to install and run on.
SUPPORTED_PY = ((3, 11), (3, 12))
PROG = Path(sys.argv[0]).stem or "tunix_harness"  # prefix of error messages: the running script


def say(msg: str = "") -> None:
    print(msg, flush=True)


def loadavg() -> str:
    try:
        return "{:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:
        return "n/a"


def gib(n_bytes: float | None) -> str:
    return "n/a" if n_bytes is None else f"{n_bytes / 2**30:.2f} GiB"


# --------------------------------------------------------------------------
# Tunix venv
# --------------------------------------------------------------------------


def _probe_python(exe: str) -> tuple[int, int] | None:
    """Returns (major, minor) if `exe` runs and can create a venv, else None."""
    try:
        out = subprocess.run(
            [exe, "-c", "import sys, venv, ensurepip; print('%d %d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    try:
        major, minor = (int(x) for x in out.stdout.split())
    except ValueError:
        return None
    return major, minor


def find_base_python(explicit: str | None) -> str:
    """Finds an interpreter to build the Tunix venv with.

    Order: --python / $TUNIX_PYTHON; the interpreter behind the running one
    (the project venv's base, Python 3.11); python3.11 and python3.12 on PATH;
    pyenv's installs ($PYENV_ROOT or ~/.pyenv, then /root/.pyenv).
    """
    candidates: list[str] = []
    if explicit:
        candidates.append(explicit)
    env_py = os.environ.get("TUNIX_PYTHON")
    if env_py:
        candidates.append(env_py)
    base = getattr(sys, "_base_executable", None)
    if base:
        candidates.append(base)
    for name in ("python3.11", "python3.12"):
        found = shutil.which(name)
        if found:
            candidates.append(found)
    roots = []
    for root in (os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv"), "/root/.pyenv"):
        if root and root not in roots:
            roots.append(root)
    for root in roots:
        for minor in (11, 12):
            candidates += sorted(
                glob.glob(f"{root}/versions/3.{minor}.*/bin/python3.{minor}"),
                reverse=True,
            )
    candidates.append("/root/.pyenv/versions/3.12.1/bin/python3.12")

    tried = []
    seen = set()
    for exe in candidates:
        if exe in seen:
            continue
        seen.add(exe)
        ver = _probe_python(exe)
        tried.append(f"{exe} -> {ver}")
        if ver is None:
            continue
        if explicit and exe == explicit:
            return exe  # the user asked for this one
        if ver in SUPPORTED_PY:
            return exe
    raise SystemExit(
        f"{PROG}: no usable Python 3.11/3.12 interpreter found for the "
        "Tunix venv. Tried:\n  " + "\n  ".join(tried) + "\nPass one with --python or $TUNIX_PYTHON."
    )


def venv_python() -> Path:
    return VENV / "bin" / "python"


def wanted_stamp(base_python: str) -> dict:
    req = REQUIREMENTS.read_bytes()
    ver = subprocess.run(
        [base_python, "-c", "import sys; print(sys.version.split()[0])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return {
        "requirements_sha256": hashlib.sha256(req).hexdigest(),
        "python_version": ver,
    }


def read_stamp() -> dict | None:
    try:
        return json.loads((VENV / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


def ensure_venv(args) -> Path:
    """Creates or reuses bench/.tunix-venv; returns its python."""
    py = venv_python()
    if args.skip_install:
        if not py.exists():
            raise SystemExit(f"{PROG}: --skip-install given but {py} does not exist; run once without --skip-install.")
        say(f"[tunix venv] --skip-install: using {VENV} as it is")
        return py
    if not REQUIREMENTS.exists():
        raise SystemExit(f"{PROG}: missing {REQUIREMENTS}")

    base = find_base_python(args.python)
    want = wanted_stamp(base)
    have = read_stamp()
    if py.exists() and have is not None and all(have.get(k) == v for k, v in want.items()):
        say(
            f"[tunix venv] up to date ({VENV}, python {want['python_version']}, "
            f"requirements sha256 {want['requirements_sha256'][:12]})"
        )
        return py

    why = (
        "not present" if not VENV.exists() else ("requirements or interpreter changed" if have else "no install stamp")
    )
    say(f"[tunix venv] (re)building {VENV}: {why}")
    say(f"[tunix venv] base interpreter: {base} (Python {want['python_version']})")
    if VENV.exists():
        shutil.rmtree(VENV)
    t0 = time.time()
    subprocess.run([base, "-m", "venv", str(VENV)], check=True)
    env = clean_env()
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    say(
        f"[tunix venv] pip install -r {REQUIREMENTS.relative_to(REPO)} "
        "(first install downloads a few hundred MB; pip output follows)"
    )
    rc = subprocess.run(
        [str(py), "-m", "pip", "install", "--progress-bar", "off", "-r", str(REQUIREMENTS)],
        env=env,
    ).returncode
    if rc != 0:
        raise SystemExit(
            f"{PROG}: pip install into {VENV} failed (exit {rc}); "
            "the venv is left without a stamp and will be rebuilt next run."
        )
    check = subprocess.run(
        [
            str(py),
            "-c",
            "import tunix, jax, flax; "
            "print('tunix', tunix.__version__, 'jax', jax.__version__, "
            "'flax', flax.__version__)",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    if check.returncode != 0:
        say(check.stdout + check.stderr)
        raise SystemExit(f"{PROG}: tunix does not import in the new venv")
    say(f"[tunix venv] ready in {time.time() - t0:.0f}s: {check.stdout.strip()}")
    (VENV / STAMP_NAME).write_text(json.dumps(want, indent=1) + "\n")
    return py


# --------------------------------------------------------------------------
# Running one side
# --------------------------------------------------------------------------


def clean_env() -> dict:
    env = dict(os.environ)
    for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__"):
        env.pop(k, None)
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def last_json_with(lines: list[str], key: str) -> dict | None:
    """The last line of `lines` that is a JSON object containing `key`, parsed; None if none is."""
    for line in reversed(lines):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and key in obj:
                return obj
    return None


def wait_with_peak_rss(proc: subprocess.Popen) -> tuple[int, int | None]:
    """Reaps `proc` with wait4: (exit status as Popen reports it, peak RSS in bytes or None)."""
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    except (AttributeError, ChildProcessError, OSError):  # no wait4, or already reaped
        return proc.wait(), None
    proc.returncode = os.waitstatus_to_exitcode(status)
    # ru_maxrss is in KiB on Linux (bytes on macOS).
    scale = 1 if sys.platform == "darwin" else 1024
    return proc.returncode, int(usage.ru_maxrss) * scale


def run_and_parse(
    label: str, cmd: list[str], timeout: float, required_key: str = "seconds_per_step"
) -> tuple[dict | None, str]:
    """Runs cmd (stderr passes through, stdout echoed) and returns the last
    JSON object found on its stdout that has `required_key`, with
    "peak_rss_bytes" (the subprocess's peak resident memory) added, plus an
    error message if there is none."""
    say(f"[{label}] $ {' '.join(cmd)}")
    say(f"[{label}] load average before start: {loadavg()}")
    t0 = time.time()
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=str(REPO),
            env=clean_env(),
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
    except OSError as e:
        return None, f"could not start: {e}"
    lines = []
    timed_out = threading.Event()

    def _kill():
        timed_out.set()
        proc.kill()

    watchdog = threading.Timer(timeout, _kill)
    watchdog.daemon = True
    watchdog.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line)
            sys.stdout.write(f"[{label}] {line}")
            sys.stdout.flush()
        rc, peak_rss = wait_with_peak_rss(proc)
    finally:
        watchdog.cancel()
    wall = time.time() - t0
    result = last_json_with(lines, required_key)
    say(f"[{label}] exited {rc} after {wall:.1f}s; peak RSS {gib(peak_rss)}")
    if result is None:
        if timed_out.is_set():
            return None, f"timed out after {timeout:.0f}s"
        return None, (f"exit status {rc} and no JSON line with \"{required_key}\" on stdout")
    if rc != 0:
        say(f"[{label}] warning: non-zero exit {rc} but a result was printed")
    result["peak_rss_bytes"] = peak_rss
    return result, ""


def cpu_note(res: dict) -> str:
    cpu = res.get("cpu_seconds_per_step")
    return f"; process CPU {cpu:.3f} s/step" if isinstance(cpu, (int, float)) else ""


def our_python() -> str:
    venv_py = REPO / ".venv" / "bin" / "python"
    return str(venv_py) if venv_py.exists() else sys.executable
