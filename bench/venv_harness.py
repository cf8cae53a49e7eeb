"""What the comparisons against another framework share (bench/compare_tunix.py and
bench/compare_tunix_real.py against google-tunix, bench/compare_trl.py against TRL): the other
side's own virtual environment, running one side of a comparison in a subprocess, and reading its
result. Runs in the project's venv; imports nothing beyond the standard library.

  VenvSpec(...)       one pinned environment: its folder, its requirements file, the interpreter
                      versions it installs on, the packages to install before the rest (e.g. torch's
                      CPU build, so that nothing else resolves another torch), and a check that it
                      imports. bench/tunix_harness.py and bench/compare_trl.py each define one.
  ensure_venv(args, spec)
                      creates (or reuses) spec.venv from spec.requirements. A hash stamp inside the
                      venv records what was installed; the venv is rebuilt only when the requirements
                      file (or the base interpreter) changes. pip's output is shown as it installs.
                      args has .skip_install and .python (the --skip-install / --python options).
  run_and_parse(label, cmd, timeout)
                      runs one side (stdout echoed with a [label] prefix, stderr passed through),
                      returns the last JSON object on its stdout that has the required key, with
                      "peak_rss_bytes" added: the subprocess's peak resident memory (ru_maxrss of
                      wait4 on it, the kernel's high-water mark of the process).
  ratios(ours, other) time_ratio / memory_ratio = ours / the other side, against the target.
  our_python()        the project venv's interpreter.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
STAMP_NAME = ".requirements-stamp.json"
PROG = Path(sys.argv[0]).stem or "venv_harness"  # prefix of error messages: the running script


@dataclass(frozen=True)
class VenvSpec:
    """One pinned virtual environment for the other side of a comparison.

    name: short label ("tunix", "trl") for messages; venv: its folder (git-ignored); requirements:
    the pinned requirements file (a change to it rebuilds the venv); supported_python: the
    (major, minor) versions the pinned set installs and runs on, preferred first; python_env:
    the environment variable that names a base interpreter; install_first: names of packages whose
    pinned lines in the requirements file are installed on their own before the rest, and then held
    by a constraint file while the rest installs; check: Python code that imports the main packages,
    prints their versions and exits non-zero when the environment is wrong; size_note: what the first
    install downloads, for the message.
    """

    name: str
    venv: Path
    requirements: Path
    supported_python: tuple[tuple[int, int], ...]
    python_env: str
    check: str
    install_first: tuple[str, ...] = field(default_factory=tuple)
    size_note: str = "a few hundred MB"


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
# The other side's venv
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


def find_base_python(explicit: str | None, spec: VenvSpec) -> str:
    """Finds an interpreter to build spec's venv with.

    Order: --python / $<spec.python_env>; the interpreter behind the running one
    (the project venv's base, Python 3.11); python3.X on PATH for each supported
    version; pyenv's installs ($PYENV_ROOT or ~/.pyenv, then /root/.pyenv).
    """
    candidates: list[str] = []
    if explicit:
        candidates.append(explicit)
    env_py = os.environ.get(spec.python_env)
    if env_py:
        candidates.append(env_py)
    base = getattr(sys, "_base_executable", None)
    if base:
        candidates.append(base)
    for major, minor in spec.supported_python:
        found = shutil.which(f"python{major}.{minor}")
        if found:
            candidates.append(found)
    roots = []
    for root in (os.environ.get("PYENV_ROOT"), os.path.expanduser("~/.pyenv"), "/root/.pyenv"):
        if root and root not in roots:
            roots.append(root)
    for root in roots:
        for major, minor in spec.supported_python:
            candidates += sorted(
                glob.glob(f"{root}/versions/{major}.{minor}.*/bin/python{major}.{minor}"),
                reverse=True,
            )

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
        if ver in spec.supported_python:
            return exe
    versions = "/".join(f"{a}.{b}" for a, b in spec.supported_python)
    raise SystemExit(
        f"{PROG}: no usable Python {versions} interpreter found for the {spec.name} venv. Tried:\n  "
        + "\n  ".join(tried)
        + f"\nPass one with --python or ${spec.python_env}."
    )


def venv_python(spec: VenvSpec) -> Path:
    return spec.venv / "bin" / "python"


def wanted_stamp(base_python: str, spec: VenvSpec) -> dict:
    req = spec.requirements.read_bytes()
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


def read_stamp(spec: VenvSpec) -> dict | None:
    try:
        return json.loads((spec.venv / STAMP_NAME).read_text())
    except (OSError, ValueError):
        return None


def pinned_lines(requirements: Path, names: tuple[str, ...]) -> list[str]:
    """The requirement lines of `requirements` that pin one of `names` (compared as pip does:
    case-insensitive, - _ . alike)."""

    def norm(name: str) -> str:
        return re.sub(r"[-_.]+", "-", name).lower()

    wanted = {norm(n) for n in names}
    lines = []
    for raw in requirements.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        m = re.match(r"([A-Za-z0-9][A-Za-z0-9._-]*)", line)
        if m and norm(m.group(1)) in wanted:
            lines.append(line)
    missing = wanted - {norm(re.match(r"[A-Za-z0-9._-]+", x).group(0)) for x in lines}
    if missing:
        raise SystemExit(f"{PROG}: {requirements} pins none of {sorted(missing)} (install_first)")
    return lines


def _pip(py: Path, args: list[str], env: dict) -> int:
    return subprocess.run([str(py), "-m", "pip", "install", "--progress-bar", "off", *args], env=env).returncode


def ensure_venv(args, spec: VenvSpec) -> Path:
    """Creates or reuses spec.venv; returns its python."""
    tag = f"[{spec.name} venv]"
    py = venv_python(spec)
    if args.skip_install:
        if not py.exists():
            raise SystemExit(f"{PROG}: --skip-install given but {py} does not exist; run once without --skip-install.")
        say(f"{tag} --skip-install: using {spec.venv} as it is")
        return py
    if not spec.requirements.exists():
        raise SystemExit(f"{PROG}: missing {spec.requirements}")

    base = find_base_python(args.python, spec)
    want = wanted_stamp(base, spec)
    have = read_stamp(spec)
    if py.exists() and have is not None and all(have.get(k) == v for k, v in want.items()):
        say(
            f"{tag} up to date ({spec.venv}, python {want['python_version']}, "
            f"requirements sha256 {want['requirements_sha256'][:12]})"
        )
        return py

    why = (
        "not present"
        if not spec.venv.exists()
        else ("requirements or interpreter changed" if have else "no install stamp")
    )
    say(f"{tag} (re)building {spec.venv}: {why}")
    say(f"{tag} base interpreter: {base} (Python {want['python_version']})")
    if spec.venv.exists():
        shutil.rmtree(spec.venv)
    t0 = time.time()
    subprocess.run([base, "-m", "venv", str(spec.venv)], check=True)
    env = clean_env()
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    req = spec.requirements.relative_to(REPO)
    first = pinned_lines(spec.requirements, spec.install_first) if spec.install_first else []
    failed = (
        f"{PROG}: pip install into {spec.venv} failed (exit {{rc}}); "
        "the venv is left without a stamp and will be rebuilt next run."
    )
    with tempfile.TemporaryDirectory() as tmp:
        constraint: list[str] = []
        if first:
            say(f"{tag} pip install {' '.join(first)} (first, on its own; pip output follows)")
            rc = _pip(py, first, env)
            if rc != 0:
                raise SystemExit(failed.format(rc=rc))
            held = Path(tmp) / "constraints.txt"
            held.write_text("\n".join(first) + "\n")
            constraint = ["-c", str(held)]
        say(
            f"{tag} pip install -r {req}{' with those pins as constraints' if first else ''} "
            f"(first install downloads {spec.size_note}; pip output follows)"
        )
        rc = _pip(py, ["-r", str(spec.requirements), *constraint], env)
        if rc != 0:
            raise SystemExit(failed.format(rc=rc))
    check = subprocess.run([str(py), "-c", spec.check], env=env, capture_output=True, text=True)
    if check.returncode != 0:
        say(check.stdout + check.stderr)
        raise SystemExit(f"{PROG}: the new {spec.name} venv fails its check (see above); it has no stamp")
    say(f"{tag} ready in {time.time() - t0:.0f}s: {check.stdout.strip()}")
    (spec.venv / STAMP_NAME).write_text(json.dumps(want, indent=1) + "\n")
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


def ratios(ours: dict | None, other: dict | None, target: float = 0.5) -> dict:
    """time_ratio / memory_ratio = ours / the other side's seconds_per_step / peak_rss_bytes (None where
    a side or a figure is missing) and whether each meets the target (ratio <= target)."""
    out: dict = {}
    for name, key in (("time", "seconds_per_step"), ("memory", "peak_rss_bytes")):
        o, t = (ours or {}).get(key), (other or {}).get(key)
        ratio = o / t if o and t else None
        out[f"{name}_ratio"] = ratio
        out[f"{name}_target_met"] = None if ratio is None else ratio <= target
    return out


def finish(
    summary: dict,
    anchor: str,
    target: float,
    ran_anchor: bool,
    ran_ours: bool,
    require_target: bool = False,
    as_json: bool = False,
) -> int:
    """The end of an anchor comparison: each ratio of `summary` (`ratios`) against `target`, the load
    average, the summary as JSON when asked, the `time_ratio=X memory_ratio=Y` line; the exit status
    (3: the anchor's side asked for and missing, 2: ours, 1: a target not met under require_target)."""
    ours, theirs = summary.get("ours"), summary.get(anchor)
    status = 0
    if theirs and ours:
        for name in ("time", "memory"):
            ratio, met = summary[f"{name}_ratio"], summary[f"{name}_target_met"]
            say(
                f"{name}: ours/{anchor} = {fmt(ratio)}; target <= {target}: "
                f"{'not measured' if met is None else 'MET' if met else 'NOT MET'}"
            )
            if require_target and met is False:
                status = 1
    say(f"load average now: {loadavg()} (figures are wall clock on a shared {os.cpu_count()}-core machine)")
    if as_json:
        print(json.dumps(summary), flush=True)
    say(f"time_ratio={fmt(summary['time_ratio'])} memory_ratio={fmt(summary['memory_ratio'])}")
    if ran_anchor and not theirs:
        return 3
    if ran_ours and not ours:
        return 2
    return status


def fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def cpu_note(res: dict) -> str:
    cpu = res.get("cpu_seconds_per_step")
    return f"; process CPU {cpu:.3f} s/step" if isinstance(cpu, (int, float)) else ""


def our_python() -> str:
    venv_py = REPO / ".venv" / "bin" / "python"
    return str(venv_py) if venv_py.exists() else sys.executable
